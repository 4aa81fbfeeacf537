"""Chip recipes (workers/engine/launch/recipes.yaml): the environment per chip and shape, with reasons,
sources and the user's overrides."""

from workers.engine.launch import recipes
from workers.engine.launch.recipes import (
    RecipeContext,
    apply_recipes,
    hccl_buffsize_mb,
    model_family,
    recipe_items,
    search_serving,
    serving_for,
    serving_recipes,
)

A3_DEEPSEEK = RecipeContext(
    chip="a3", family="deepseek", node_ip="10.0.0.11", ifname="enp189s0f0", vllm_ascend="0.18.0"
)


def applied(ctx, user_env=None):
    return apply_recipes(recipe_items(ctx), user_env or {}, ctx.vllm_ascend)


def test_every_recipe_has_sources_and_a_reason_per_entry():
    for recipe in recipes.load():
        assert all(source.startswith("https://") for source in recipe["sources"])
        for entry in recipe.get("env") or ():
            assert entry["why"].strip()


def test_a3_deepseek_gets_aiv_the_hccl_interface_and_balance_scheduling():
    result = applied(A3_DEEPSEEK)
    assert result.env == {
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "HCCL_IF_IP": "10.0.0.11",
        "HCCL_SOCKET_IFNAME": "enp189s0f0",
        "GLOO_SOCKET_IFNAME": "enp189s0f0",
        "TP_SOCKET_IFNAME": "enp189s0f0",
        "VLLM_ASCEND_BALANCE_SCHEDULING": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    }
    assert result.additional_config == {}
    first = result.reasons[0]
    assert first.code == "recipe_env"
    assert first.message.startswith("HCCL_OP_EXPANSION_MODE=AIV (Atlas A3 · DeepSeek): Collectives are")
    assert first.params["sources"][0].endswith("DeepSeek-V3.1.md")


def test_on_0_23_0_balance_scheduling_goes_into_additional_config():
    result = applied(RecipeContext(**{**A3_DEEPSEEK.__dict__, "vllm_ascend": "0.23.0"}))
    assert "VLLM_ASCEND_BALANCE_SCHEDULING" not in result.env
    assert result.additional_config == {"enable_balance_scheduling": True}
    assert any(r.params.get("name") == "additional_config.enable_balance_scheduling" for r in result.reasons)


def test_a_variable_a_release_does_not_read_yet_is_left_out():
    result = applied(RecipeContext(**{**A3_DEEPSEEK.__dict__, "vllm_ascend": "0.11.0"}))
    assert "VLLM_ASCEND_BALANCE_SCHEDULING" not in result.env


def test_without_a_node_address_the_interface_entries_are_left_out():
    result = applied(RecipeContext(chip="a3", family="deepseek"))
    assert "HCCL_IF_IP" not in result.env
    assert "GLOO_SOCKET_IFNAME" not in result.env
    assert result.env["HCCL_OP_EXPANSION_MODE"] == "AIV"


def test_other_models_on_a3_and_single_a2_nodes_get_no_recipe():
    assert recipe_items(RecipeContext(chip="a3")) == []
    assert recipe_items(RecipeContext(chip="910b", family="deepseek")) == []


def test_a2_multi_node_keeps_intra_node_traffic_on_pcie():
    result = applied(RecipeContext(chip="910b", multi_node=True, node_ip="10.0.0.12", ifname="eth1"))
    for name, value in {
        "OMP_PROC_BIND": "false",
        "OMP_NUM_THREADS": "1",
        "HCCL_BUFFSIZE": "200",
        "HCCL_INTRA_PCIE_ENABLE": "1",
        "HCCL_INTRA_ROCE_ENABLE": "0",
        "HCCL_IF_IP": "10.0.0.12",
    }.items():
        assert result.env[name] == value
    assert "VLLM_ASCEND_BALANCE_SCHEDULING" not in result.env  # a DeepSeek-only entry
    deepseek = applied(RecipeContext(chip="910b", multi_node=True, family="deepseek", vllm_ascend="0.18.0"))
    assert deepseek.env["VLLM_ASCEND_BALANCE_SCHEDULING"] == "1"


def test_the_950_raises_hccl_buffers_and_timeouts():
    result = applied(RecipeContext(chip="950"))
    assert result.env["HCCL_BUFFSIZE"] == "512"
    assert result.env["HCCL_CONNECT_TIMEOUT"] == result.env["HCCL_EXEC_TIMEOUT"] == "600"
    assert hccl_buffsize_mb(result.env) == 512


def test_the_310p_recipe_is_notes_on_what_the_launch_already_does():
    result = applied(RecipeContext(chip="310p"))
    assert result.env == {}
    notes = [r.message for r in result.reasons]
    assert [r.code for r in result.reasons] == ["recipe_note"] * 4
    assert any("float16 only" in note for note in notes)
    assert any("-310p" in note and "W8A8SC" in note for note in notes)
    assert any("--max-model-len is always given" in note for note in notes)


def test_the_users_env_overrides_a_recipe_entry_and_the_review_says_so():
    result = applied(RecipeContext(chip="950"), {"HCCL_BUFFSIZE": "1024", "MY_FLAG": "x"})
    assert result.env["HCCL_BUFFSIZE"] == "1024"
    assert result.env["MY_FLAG"] == "x"
    overridden = next(r for r in result.reasons if r.code == "recipe_env_overridden")
    assert overridden.message == "HCCL_BUFFSIZE=1024 as you set it (the Ascend 950 recipe gives 512)."
    assert hccl_buffsize_mb(result.env) == 1024


def test_hccl_buffsize_falls_back_to_canns_default():
    assert hccl_buffsize_mb({}) == 200
    assert hccl_buffsize_mb({"HCCL_BUFFSIZE": "lots"}) == 200


def test_deepseek_configs_are_the_deepseek_family():
    assert model_family({"architecture": "DeepseekV3ForCausalLM"}) == "deepseek"
    assert model_family({"model_type": "deepseek_v2"}) == "deepseek"
    assert model_family({"architecture": "Qwen2ForCausalLM"}) is None


def test_serving_recipes_are_searched_by_every_word_in_any_case_and_by_kind_of_node():
    assert [r["id"] for r in search_serving("DEEPSEEK two a2")] == ["a2-deepseek-w8a8-two-nodes"]
    assert [r["id"] for r in search_serving("deepseek", "a3")] == ["a3-deepseek-w8a8", "a3-deepseek-pd-2p1d"]
    assert [r["id"] for r in search_serving("HCCL_INTRA_PCIE_ENABLE")] == ["a2-deepseek-w8a8-two-nodes"]
    assert [r["id"] for r in search_serving("Mooncake")] == ["a3-deepseek-pd-2p1d"]  # the connector
    assert search_serving("deepseek", "300i-duo") == []
    assert len(search_serving()) == len(serving_recipes())


def test_a_model_finds_the_serving_recipes_written_for_it():
    assert {r["hardware"] for r in serving_for({"architecture": "DeepseekV3ForCausalLM"})} == {"a2", "a3"}
    assert {r["id"] for r in serving_for({}, "Qwen3-32B")} == {"a2-qwen-dense", "300i-duo-qwen3-w8a8sc"}
    assert serving_for({"architecture": "LlamaForCausalLM"}, "llama-3-8b") == []
