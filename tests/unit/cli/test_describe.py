"""`describe deployment` and `describe node` against a local server answering as the API documents: each
section from the calls it makes, and what a panel that refuses one of them leaves."""

from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

SPEC = {
    "name": "qwen-chat",
    "model": "qwen2.5-7b-instruct",
    "placement": {"node": "sim-a2", "npus": [0, 1]},
    "engine": {"max_model_len": 4096},
    "replicas": 2,
    "state": "running",
}
PLAN = {
    "plan": {
        "tensor_parallel_size": 2,
        "data_parallel_size": 1,
        "max_model_len": 4096,
        "dtype": "bfloat16",
        "kv_cache_tokens": 120000,
        "max_concurrent_seqs": 29,
        "memory_per_npu": {
            "total_bytes": 64 * 1024**3,
            "weights_bytes": 8 * 1024**3,
            "kv_cache_bytes": 40 * 1024**3,
            "reserve_bytes": 6 * 1024**3,
            "free_bytes": 10 * 1024**3,
        },
    },
    "warnings": [{"level": "warning", "message": "max_model_len leaves room for 29 sequences."}],
}
OPERATION = {
    "id": "0b6f",
    "kind": "deploy",
    "node": "sim-a2",
    "target": "qwen-chat",
    "status": "failed",
    "stage": "Start the engine",
    "error": "The engine exited.",
    "created": None,
}


def described():
    return deployment(
        replicas_wanted=2,
        replicas=[{"name": "qwen-chat-r2", "status": "starting", "desired_state": "running"}],
        rollout={
            "id": 4,
            "status": "running",
            "phase": "surge",
            "done": 0,
            "total": 2,
            "message": "r3 starts",
        },
        plan=PLAN,
        runtime_kind="process",
        restart_count=2,
        failed_restarts=1,
        served_model_name="qwen-chat",
        routing="prefix",
        findings={
            "findings": [
                {"message": "HCCL ranks could not connect in time.", "hint": "Check the NPU network."}
            ],
            "log_tail": [f"line {n}" for n in range(1, 14)],
        },
    )


def test_describe_deployment_prints_each_section(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(described())))
    api.on("GET", "/api/v1/deployments/7/", Answer(200, SPEC))
    api.on("GET", "/api/v1/operations/", Answer(200, page(OPERATION)))
    assert main(["describe", "deployment", "qwen-chat"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Name:          qwen-chat"
    assert "Status:        running" in lines
    assert "Restarts:      2 (1 failed in a row)" in lines
    assert "Routing:       prefix" in lines  # how the gateway picks among the replicas
    assert "Created:       2026-01-01T10:00:00Z (" in out
    # the spec as `get --spec` prints it, indented
    assert "Spec:\n  name: qwen-chat\n  model: qwen2.5-7b-instruct\n" in out
    assert "Placement:\n  NODE    NPUS (LOGIC IDS)  NPU IDS\n  sim-a2  0, 1              0, 1\n" in out
    assert "  tensor_parallel_size 2, data_parallel_size 1, max_model_len 4096, dtype bfloat16" in lines
    assert "  KV cache: 120000 tokens, 29 sequences" in lines
    assert (
        "  HBM per NPU: weights 8.0 GiB, KV cache 40.0 GiB, reserve 6.0 GiB, free 10.0 GiB of 64.0 GiB"
        in lines
    )
    assert "Replicas: 2 wanted" in lines
    assert "  qwen-chat-r2  starting  running" in lines
    assert "Rollout: #4 running, 0/2 replaced, phase surge: r3 starts" in lines
    assert "Planner warnings:\n  max_model_len leaves room for 29 sequences.\n" in out
    assert lines[lines.index("Recent operations:") + 2].split()[:3] == ["deploy", "failed", "qwen-chat"]
    assert "Findings:\n  HCCL ranks could not connect in time.\n    hint: Check the NPU network.\n" in out
    assert lines[-11:] == ["Log tail of the last failed start (last 10 lines):"] + [
        f"  line {n}" for n in range(4, 14)
    ]
    assert api.sent("GET", "/api/v1/operations/")[0].query == {"target": "qwen-chat"}


def test_describe_deployment_on_a_panel_that_cannot_filter_operations(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on("GET", "/api/v1/deployments/7/", Answer(200, SPEC))
    api.on("GET", "/api/v1/operations/", Answer(400, {"detail": "Unknown query parameter: target."}))
    assert main(["describe", "deployment", "qwen-chat"]) == 0
    out = capsys.readouterr().out
    assert "Recent operations:\n  <not available: Unknown query parameter: target.>\n" in out
    assert "Findings:\n  <none>\n" in out


def test_describe_a_deployment_that_is_not_there_exits_1(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page()))
    assert main(["describe", "deployment", "nope"]) == 1
    assert capsys.readouterr().err == "error: No deployment named 'nope'.\n"


NODE = {
    "id": 1,
    "name": "sim-a2",
    "status": "online",
    "address": "10.0.0.5",
    "transport": "agent",
    "labels": {"rack": "r1"},
    "cordoned": False,
    "last_heartbeat": None,
    "agent_version": "0.9.0",
    "facts": {
        "os": {"pretty_name": "openEuler 22.03 (LTS-SP4)"},
        "kernel": "5.10.0",
        "arch": "aarch64",
        "cpu": {"model": "Kunpeng-920", "sockets": 2, "cores": 96},
        "numa_nodes": [{"node": 0}, {"node": 1}, {"node": 2}, {"node": 3}],
        "memory": {"total_bytes": 512 * 1024**3},
    },
    "versions": {"cann": {"version": "8.0.RC3", "path": "/usr/local/Ascend/ascend-toolkit/latest"}},
    "npus": [
        {
            "logic_id": 1,
            "npu_id": 1,
            "chip_id": 0,
            "name": "910B3",
            "health": "OK",
            "hbm_total_mb": 65536,
            "numa_node": 0,
            "bus_id": "0000:c2:00.0",
        },
        {
            "logic_id": 0,
            "npu_id": 0,
            "chip_id": 0,
            "name": "910B3",
            "health": "Warning",
            "hbm_total_mb": 65536,
            "numa_node": 0,
            "bus_id": "0000:c1:00.0",
        },
    ],  # fmt: skip
}


def test_describe_node_shows_its_npus_and_who_holds_them(api, capsys):
    api.on("GET", "/api/v1/nodes/sim-a2/", Answer(200, NODE))
    api.on(
        "GET",
        "/api/v1/deployments/",
        Answer(200, page(deployment(npus=[{"node": "sim-a2", "logic_id": 1, "npu_id": 1}]))),
    )
    alert = {"severity": "warning", "kind": "npu_health", "npu_id": 0, "message": "NPU 0 health is Warning.",
             "first_seen": None}  # fmt: skip
    api.on("GET", "/api/v1/alerts/", Answer(200, page(alert)))
    api.on("GET", "/api/v1/operations/", Answer(200, page(OPERATION)))
    assert main(["describe", "node", "sim-a2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Name:          sim-a2"
    assert "Labels:        rack=r1" in lines
    assert "Cordoned:      no" in lines
    assert "  OS:         openEuler 22.03 (LTS-SP4)" in lines
    assert "  CPU:        Kunpeng-920 (2 sockets, 96 cores)" in lines
    assert "  NUMA nodes: 4" in lines
    assert "  Memory:     512.0 GiB" in lines
    assert "  cann       8.0.RC3  /usr/local/Ascend/ascend-toolkit/latest" in lines
    npus = lines[lines.index("NPUs:") + 1 : lines.index("NPUs:") + 4]
    assert [row.split()[0] for row in npus] == ["LOGIC", "0", "1"]  # in logic id order
    assert npus[2].split()[-1] == "qwen-chat"
    assert npus[1].split()[4] == "Warning"
    assert "  qwen-chat  running  1" in lines
    assert "NPU 0 health is Warning." in out
    assert api.sent("GET", "/api/v1/deployments/")[0].query == {"node": "sim-a2"}
    assert api.sent("GET", "/api/v1/alerts/")[0].query == {"node": "sim-a2", "open": "true"}
    assert api.sent("GET", "/api/v1/operations/")[0].query == {"node": "sim-a2"}


def test_describe_a_node_that_is_not_there_exits_1(api, capsys):
    assert main(["describe", "node", "nope"]) == 1
    assert capsys.readouterr().err == "error: No node named 'nope'.\n"


def test_describe_a_disaggregated_deployment_prints_each_engines_role(api, capsys):
    disaggregated = deployment(
        role="prefill",
        roles_wanted={"prefill": 1, "decode": 2},
        replicas_wanted=1,
        replicas=[
            {"name": "qwen-chat-d1", "status": "running", "desired_state": "running", "role": "decode"},
            {"name": "qwen-chat-d2", "status": "starting", "desired_state": "running", "role": "decode"},
        ],
        served_model_name="qwen-chat",
    )
    api.on("GET", "/api/v1/deployments/", Answer(200, page(disaggregated)))
    api.on("GET", "/api/v1/deployments/7/", Answer(200, SPEC))
    api.on("GET", "/api/v1/operations/", Answer(200, page()))
    assert main(["describe", "deployment", "qwen-chat"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["Replicas:", "prefill", "1,", "decode", "2", "wanted"] in lines
    assert ["NAME", "ROLE", "STATUS", "DESIRED"] in lines
    assert ["qwen-chat", "prefill", "running", "running"] in lines
    assert ["qwen-chat-d2", "decode", "starting", "running"] in lines


def test_describe_says_what_the_autoscaler_owns_per_role(api, capsys):
    scaled = {"min": 1, "max": 3, "target": {"kv_usage": 0.8}, "up_after_s": 30, "down_after_s": 300}
    spec = {**SPEC, "roles": {"prefill": {"replicas": 1}, "decode": {"replicas": 2, "autoscale": scaled}}}
    api.on(
        "GET", "/api/v1/deployments/", Answer(200, page(deployment(roles_wanted={"prefill": 1, "decode": 2})))
    )
    api.on("GET", "/api/v1/deployments/7/", Answer(200, spec))
    api.on("GET", "/api/v1/operations/", Answer(200, page()))
    assert main(["describe", "deployment", "qwen-chat"]) == 0
    lines = [line.split(None, 1) for line in capsys.readouterr().out.splitlines()]
    assert ["Autoscaling:", "decode 1-3 replicas on kv_usage 0.8 (up after 30 s, down after 300 s)"] in lines
