"""`ascend-panel apply` and `plan` against a local server answering as the apply contract documents: what
they send (PUT by name, dry_run, wait, Idempotency-Key) and how answers become output and exit codes."""

import json
import os

import pytest

from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment

PUT = "/api/v1/deployments/qwen-chat/"
SPEC = """\
name: qwen-chat
model: qwen2.5-7b-instruct
placement: {node: sim-a2, npus: 2}
engine:
  max_model_len: 4096
"""


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "qwen-chat.yaml"
    path.write_text(SPEC)
    return str(path)


def applied(result, **extra) -> dict:
    return {"result": result, "dry_run": False, "changes": [], "effect": "none", "deployment": deployment(),
            "plan": {}, "warnings": [], **extra}  # fmt: skip


def test_it_puts_the_spec_by_name_as_json_and_prints_created(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(201, applied("created", effect="create")))
    assert main(["apply", "-f", spec_file]) == 0
    assert capsys.readouterr().out == "qwen-chat: created\n"
    (sent,) = api.sent("PUT", PUT)
    assert sent.body == {
        "name": "qwen-chat",
        "model": "qwen2.5-7b-instruct",
        "placement": {"node": "sim-a2", "npus": 2},
        "engine": {"max_model_len": 4096},
    }
    assert sent.query == {}
    assert sent.headers["Authorization"] == "Bearer ap_test"
    assert "Idempotency-Key" not in sent.headers


def test_the_same_file_again_prints_unchanged_and_exits_0(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(200, applied("unchanged")))
    assert main(["apply", "-f", spec_file]) == 0
    assert capsys.readouterr().out == "qwen-chat: unchanged\n"


def test_a_change_prints_its_fields_and_effect(api, spec_file, capsys):
    changes = [
        {"field": "engine.max_model_len", "from": 2048, "to": 4096},
        {"field": "replicas", "from": 1, "to": 2},
    ]
    api.on("PUT", PUT, Answer(202, applied("changed", changes=changes, effect="restart")))
    assert main(["apply", "-f", spec_file]) == 0
    assert capsys.readouterr().out == "qwen-chat: changed: engine.max_model_len, replicas (restart)\n"


def test_a_dry_run_asks_for_one_and_prints_the_diff(api, spec_file, capsys):
    changes = [{"field": "placement.npus", "from": [0], "to": [0, 1]}]
    answer = applied("changed", dry_run=True, changes=changes, effect="move_npus")
    api.on("PUT", PUT, Answer(202, answer))
    assert main(["apply", "-f", spec_file, "--dry-run", "--wait"]) == 0
    out = capsys.readouterr().out
    assert (
        out == "qwen-chat: changed: placement.npus (move_npus) (dry run)\n  placement.npus: [0] -> [0, 1]\n"
    )
    assert api.sent("PUT", PUT)[0].query == {"dry_run": "true"}  # no wait on a dry run


def test_wait_asks_the_panel_to_wait_for_running_and_prints_the_state(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(200, applied("created")))
    assert main(["apply", "-f", spec_file, "--wait", "--timeout", "5m"]) == 0
    assert capsys.readouterr().out == "qwen-chat: created\nqwen-chat: running\n"
    assert api.sent("PUT", PUT)[0].query == {"wait": "running", "timeout": "300"}


def test_wait_exits_1_when_the_rolling_update_it_started_failed(api, spec_file, capsys):
    rolled_back = {"id": 7, "status": "failed", "message": "qwen-chat did not start with the new launch."}
    body = applied("changed", rollout={"id": 7, "status": "running"})
    body["deployment"]["rollout"] = rolled_back
    api.on("PUT", PUT, Answer(200, body))
    assert main(["apply", "-f", spec_file, "--wait"]) == 1
    captured = capsys.readouterr()
    assert "qwen-chat: running" in captured.out
    assert "the rolling update failed: qwen-chat did not start with the new launch." in captured.err


def test_wait_on_a_stopped_spec_waits_for_stopped(api, tmp_path):
    path = tmp_path / "stopped.yaml"
    path.write_text(SPEC + "state: stopped\n")
    api.on("PUT", PUT, Answer(200, applied("changed", deployment=deployment(status="stopped"))))
    assert main(["apply", "-f", str(path), "--wait"]) == 0
    assert api.sent("PUT", PUT)[0].query == {"wait": "stopped", "timeout": "600"}


def test_a_wait_that_times_out_exits_3_with_the_panels_sentence(api, spec_file, capsys):
    detail = "qwen-chat did not reach running within 60 s (it is starting)."
    api.on("PUT", PUT, Answer(408, {"detail": detail, "deployment": deployment(status="starting")}))
    assert main(["apply", "-f", spec_file, "--wait", "--timeout", "60"]) == 3
    assert capsys.readouterr().err == f"error: {detail}\n"


def test_a_failed_start_exits_1_with_its_findings_and_log_tail(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(409, {
        "detail": "qwen-chat failed before it was running: the engine exited with code 1.",
        "deployment": deployment(status="failed"),
        "findings": [{"code": "hbm_oom", "message": "Out of NPU memory.", "hint": "Lower max_model_len."}],
        "log_tail": ["RuntimeError: NPU out of memory", "engine exited"],
    }))  # fmt: skip
    assert main(["apply", "-f", spec_file, "--wait"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: qwen-chat failed before it was running: the engine exited with code 1.",
        "  finding: Out of NPU memory.",
        "    hint: Lower max_model_len.",
        "  log tail:",
        "    RuntimeError: NPU out of memory",
        "    engine exited",
    ]


def test_field_errors_are_printed_one_per_line_by_path_and_exit_1(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(400, {
        "detail": "The spec is invalid.",
        "errors": {
            "placement.npus": ["Only 1 NPU is free on sim-a2."],
            "tensor_parallel": ["Unknown field."],
        },
    }))  # fmt: skip
    assert main(["apply", "-f", spec_file]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: The spec is invalid.",
        "  placement.npus: Only 1 NPU is free on sim-a2.",
        "  tensor_parallel: Unknown field.",
    ]


def test_the_idempotency_key_comes_from_the_flag_or_the_environment(api, spec_file, monkeypatch):
    api.on("PUT", PUT, Answer(201, applied("created")))
    assert main(["apply", "-f", spec_file, "--idempotency-key", "pipeline-41"]) == 0
    monkeypatch.setenv("ASCEND_PANEL_IDEMPOTENCY_KEY", "pipeline-42")
    assert main(["apply", "-f", spec_file]) == 0
    assert [r.headers.get("Idempotency-Key") for r in api.sent("PUT", PUT)] == ["pipeline-41", "pipeline-42"]


def test_a_file_of_several_specs_applies_each_with_its_own_key(api, tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(SPEC + "---\nname: embed\nmodel: bge-m3\n")
    api.on("PUT", PUT, Answer(200, applied("unchanged")))
    api.on("PUT", "/api/v1/deployments/embed/", Answer(201, applied("created")))
    assert main(["apply", "-f", str(path), "--idempotency-key", "k"]) == 0
    assert capsys.readouterr().out == "qwen-chat: unchanged\nembed: created\n"
    keys = [r.headers["Idempotency-Key"] for r in api.requests]
    assert keys == ["k/qwen-chat", "k/embed"]


def test_a_spec_on_stdin(api, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(SPEC))
    api.on("PUT", PUT, Answer(200, applied("unchanged")))
    assert main(["apply", "-f", "-"]) == 0
    assert api.sent("PUT", PUT)[0].body["name"] == "qwen-chat"


def test_warnings_go_to_stderr_and_stdout_stays_the_result(api, spec_file, capsys):
    warnings = [{"level": "warning", "message": "max_model_len leaves room for 3 sequences."}]
    api.on("PUT", PUT, Answer(201, applied("created", warnings=warnings)))
    assert main(["apply", "-f", spec_file]) == 0
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat: created\n"
    assert captured.err == "warning: qwen-chat: max_model_len leaves room for 3 sequences.\n"


def test_warnings_print_when_the_plan_changes_not_on_every_unchanged_apply(api, spec_file, capsys):
    warnings = [{"level": "warning", "message": "max_model_len leaves room for 3 sequences."}]
    changed = applied("changed", effect="rolling", warnings=warnings,
                      changes=[{"field": "engine.max_model_len", "from": 2048, "to": 4096}])  # fmt: skip
    api.on("PUT", PUT, Answer(200, applied("unchanged", warnings=warnings)), Answer(202, changed))
    assert main(["apply", "-f", spec_file]) == 0
    assert capsys.readouterr() == ("qwen-chat: unchanged\n", "")
    assert main(["apply", "-f", spec_file]) == 0
    assert capsys.readouterr().err == "warning: qwen-chat: max_model_len leaves room for 3 sequences.\n"


def test_json_output_is_the_panels_answer(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(201, applied("created")))
    assert main(["apply", "-f", spec_file, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == "created"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name: [unclosed", "is not valid YAML"),
        ("- just\n- a list\n", "a spec is a mapping"),
        ("model: qwen\n", "the spec has no name"),
        ("", "holds no spec"),
        ("name: a\n---\nname: a\n", "names a more than once"),
    ],
)
def test_a_bad_spec_file_is_a_usage_error_and_nothing_is_sent(api, tmp_path, capsys, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["apply", "-f", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert api.requests == []


def test_a_missing_file_is_a_usage_error(api, tmp_path, capsys):
    assert main(["apply", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "Cannot read" in capsys.readouterr().err


def test_a_wait_longer_than_the_panel_allows_is_a_usage_error(api, spec_file, capsys):
    assert main(["apply", "-f", spec_file, "--wait", "--timeout", "2h"]) == 2
    assert "--timeout is at most 1h" in capsys.readouterr().err
    assert api.requests == []


def test_plan_posts_each_spec_and_prints_the_review(api, spec_file, capsys):
    review = {
        "fits": True, "chip": "Ascend910B4",
        "plan": {"tensor_parallel_size": 2, "data_parallel_size": 1, "max_model_len": 4096,
                 "kv_cache_tokens": 81920, "max_concurrent_seqs": 20},
        "warnings": [{"level": "warning", "message": "No graph mode for this model."}],
        "nodes": [{"node": "sim-a2", "logic_ids": [0, 1], "command": "vllm serve /data/models/qwen --tp 2"}],
    }  # fmt: skip
    api.on("POST", "/api/v1/deployments/plan/", Answer(200, review))
    assert main(["plan", "-f", spec_file]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "qwen-chat: fits (Ascend910B4)",
        "  engine: tensor_parallel_size 2, data_parallel_size 1, max_model_len 4096",
        "  kv cache: 81920 tokens, 20 sequences",
        "  sim-a2 NPUs 0, 1: vllm serve /data/models/qwen --tp 2",
        "  warning: No graph mode for this model.",
    ]
    assert api.sent("POST", "/api/v1/deployments/plan/")[0].body["name"] == "qwen-chat"


def test_no_panel_configured_is_a_usage_error(monkeypatch, tmp_path, spec_file, capsys):
    for name in ("ASCEND_PANEL_URL", "ASCEND_PANEL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["apply", "-f", spec_file]) == 2
    assert "ascend-panel login URL" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "ascend-panel")
