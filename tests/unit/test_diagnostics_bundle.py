"""A node's diagnostics archive from a sim host (engine log, npu-smi, versions, environment, plog, device
logs, manifest), and the panel's packing of several nodes' archives with their clocks lined up."""

# ruff: noqa: E501  (log lines are quoted whole)

import io
import json
import os
import tarfile
from datetime import UTC, datetime, timedelta

import pytest

from panel.forensics.assemble import pack, panel_time, read_node_archive, summarize
from workers.engine.running import runtime
from workers.hosts import LocalRunner
from workers.sim.tree import create_host
from workers.steps.diagnostics import archive, collect

FAILING_LOG = """\
(Worker_TP0 pid=101) INFO 12-30 06:20:00 [model_runner_v1.py:2345] Loading model weights took 41.2 GB
[rank1]:[E1230 06:28:14.536110201 compiler_depend.ts:444] [Error]: The aicore execution times out.
[rank0]:[E1230 06:31:20.117202331 compiler_depend.ts:444] EI0002: The wait execution of the Notify register times out.
"""


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {entry.name: tar.extractfile(entry).read() for entry in tar if entry.isfile()}


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "diag-a"
    create_host(root, "atlas-800i-a2", "diag-a")
    log = runtime.log_path_for(str(root), "ds-x")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as handle:
        handle.write(FAILING_LOG)
    plog = root / "home/engine/ascend/log/debug/plog"
    plog.mkdir(parents=True)
    (plog / "plog-4410_20261230062814.log").write_text(
        "[ERROR] RUNTIME(4410,python3):2026-12-30-06:28:14 aicore timeout\n"
    )
    slog = root / "var/log/npu/slog/device-0"
    slog.mkdir(parents=True)
    (slog / "device-0_20261230.log").write_text("[ERROR] device 0 task exception\n")
    return root


async def test_a_nodes_archive_holds_the_logs_state_and_a_manifest(host, monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "1200")
    monkeypatch.setenv("PANEL_AGENT_API_KEY", "do-not-ship")
    runner = LocalRunner(base_env={"PATH": f"{host / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    request = {
        "name": "ds-x",
        "env": {"HCCL_IF_IP": "10.1.0.1", "VLLM_API_KEY": "sk-secret"},
        "home": "/home/engine",
    }
    data, manifest = await collect(runner, request, str(host), str(host / "usr/local/Ascend"), "diag-a")
    files = members(data)
    assert files["diag-a/engine.log"].decode() == FAILING_LOG
    assert b"910B" in files["diag-a/npu-smi-info.txt"]
    assert "driver" in json.loads(files["diag-a/versions.json"])
    environment = files["diag-a/environment.txt"].decode()
    assert "HCCL_IF_IP=10.1.0.1" in environment
    assert "HCCL_CONNECT_TIMEOUT=1200" in environment
    assert "secret" not in environment
    assert "do-not-ship" not in environment
    assert files["diag-a/plog/debug/plog/plog-4410_20261230062814.log"].startswith(b"[ERROR] RUNTIME")
    assert files["diag-a/device-logs/device-0/device-0_20261230.log"] == b"[ERROR] device 0 task exception\n"
    assert json.loads(files["diag-a/manifest.json"]) == manifest
    assert [f["code"] for f in manifest["findings"]] == ["peer_rank_died"]
    assert (manifest["first_rank"]["rank"], manifest["first_rank"]["line_no"]) == (1, 2)
    assert datetime.fromisoformat(manifest["collected_at"]).tzinfo is not None
    assert set(manifest["files"]) >= {"engine.log", "npu-smi-info.txt", "versions.json", "environment.txt"}


async def test_what_is_missing_is_said_not_faked(tmp_path):
    root = tmp_path / "bare"
    create_host(root, "atlas-800i-a2", "bare")
    runner = LocalRunner(base_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    _, manifest = await collect(
        runner, {"name": "never-started", "home": "/nobody"}, str(root), str(root), "bare"
    )
    assert "no engine log" in manifest["skipped"]["engine.log"]
    assert "nothing in" in manifest["skipped"]["plog"]
    assert manifest["findings"] == []
    assert manifest["first_rank"] is None


def node_upload(node, log, collected_at, utc_offset_s, first_rank):
    manifest = {
        "collected_at": collected_at,
        "utc_offset_s": utc_offset_s,
        "first_rank": first_rank,
        "findings": [],
    }
    return archive({"engine.log": log.encode()}, manifest, prefix=node)


def test_two_nodes_clocks_are_lined_up_and_the_earliest_failure_wins():
    # Node a runs UTC+8 and its clock is right; node b runs UTC and its clock is 30 s behind the panel's.
    a_log = "(Worker_TP0 pid=1) ERROR 12-30 14:28:20 [x.py:1] EI0002 notify wait timeout\n"
    b_log = "(Worker_TP1 pid=2) ERROR 12-30 06:27:55 [x.py:1] RuntimeError: device lost\n"
    uploads = {
        "node-a": (node_upload("node-a", a_log, "2026-12-30T06:40:00+00:00", 8 * 3600,
                               {"rank": 0, "where": "Worker_TP0", "line": a_log.strip(), "line_no": 1}),
                   "2026-12-30T06:40:01+00:00"),
        "node-b": (node_upload("node-b", b_log, "2026-12-30T06:39:31+00:00", 0,
                               {"rank": 1, "where": "Worker_TP1", "line": b_log.strip(), "line_no": 1}),
                   "2026-12-30T06:40:02+00:00"),
    }  # fmt: skip
    seen, contents = {}, {}
    for node, (data, received_at) in uploads.items():
        manifest, files = read_node_archive(data, node)
        log = dict(files)["engine.log"].decode()
        seen[node] = {"manifest": manifest, "received_at": received_at, "engine_log": log}
        contents[node] = files
    summary, timeline = summarize(seen)
    # b's 06:27:55 is 06:28:26 on the panel's clock (31 s behind), a's 14:28:20 local is 06:28:21 UTC (+1 s).
    assert summary["clocks"]["node-b"]["skew_s"] == 31.0
    assert summary["first_failure"]["node"] == "node-a"
    assert summary["first_failure"]["time"] == "2026-12-30T06:28:21+00:00"
    lines = timeline.splitlines()[1:]
    assert [line.split()[1] for line in lines] == ["node-a", "node-b"]
    assert lines[1].startswith("2026-12-30T06:28:26+00:00  node-b")

    bundle = members(pack("diagnostics-ds", summary, timeline, contents))
    assert set(bundle) == {
        "diagnostics-ds/MANIFEST.json", "diagnostics-ds/timeline.txt",
        "diagnostics-ds/node-a/manifest.json", "diagnostics-ds/node-a/engine.log",
        "diagnostics-ds/node-b/manifest.json", "diagnostics-ds/node-b/engine.log",
    }  # fmt: skip
    assert json.loads(bundle["diagnostics-ds/MANIFEST.json"])["first_failure"]["rank"] == 0


def test_names_that_would_leave_the_nodes_folder_are_dropped():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("node-a/engine.log", "../etc/passwd", "/abs/file", "node-a/../../x"):
            entry = tarfile.TarInfo(name)
            entry.size = 2
            tar.addfile(entry, io.BytesIO(b"ok"))
    _, files = read_node_archive(buffer.getvalue(), "node-a")
    assert [name for name, _ in files] == ["engine.log"]


def test_a_line_without_a_time_has_no_place_on_the_timeline():
    manifest = {"collected_at": datetime.now(UTC).isoformat(), "utc_offset_s": 0}
    assert panel_time("Traceback (most recent call last):", manifest, timedelta(0)) is None
