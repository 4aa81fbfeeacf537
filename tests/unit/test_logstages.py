"""vLLM start-up stages read from log lines: the shared real capture and lines of other versions."""

import pathlib

import pytest

from workers.engine.running.logstages import STAGE_TITLES, StageUpdate, StartupProgress, read_stage

SAMPLES = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "ascend-samples"
ASCEND_STARTUP = SAMPLES / "vllm-serve-startup_ascend_v1_01.txt"


@pytest.mark.skipif(not ASCEND_STARTUP.exists(), reason="shared ascend-samples are not present")
def test_it_follows_a_real_vllm_ascend_start_up_to_ready():
    progress = StartupProgress()
    updates = [u for line in ASCEND_STARTUP.read_text().splitlines() if (u := progress.feed(line))]
    stages = [update.stage for update in updates]
    for stage in (
        "starting",
        "engine",
        "loading_weights",
        "weights_loaded",
        "kv_cache",
        "api_server",
        "ready",
    ):
        assert stage in stages
    assert [u.percent for u in updates] == sorted(u.percent for u in updates)
    assert progress.ready
    assert progress.kv_cache_tokens == 744_048
    assert progress.max_concurrency == pytest.approx(28.36)
    assert StageUpdate("graph_capture", 88, "skipped (eager mode)") in updates


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.39it/s]",
            StageUpdate("loading_weights", 37, "2/4 shards"),
        ),
        (
            "(VllmWorker rank=0 pid=4242) INFO 06-01 10:00:00 [model_runner_v1.py:1800] "
            "Loading model weights took 14.2487 GB",
            StageUpdate("weights_loaded", 62, "14.2 GiB"),
        ),
        (
            "(EngineCore_DP0 pid=77) INFO 09-01 12:00:00 [gpu_model_runner.py:2000] "
            "Model loading took 28.9 GiB and 41.2 seconds",
            StageUpdate("weights_loaded", 62, "28.9 GiB"),
        ),
        (
            "(EngineCore_DP0 pid=77) INFO [gpu_worker.py:276] Available KV cache memory: 39.72 GiB",
            StageUpdate("kv_cache", 70, "39.7 GiB"),
        ),
        (
            "(EngineCore_DP1 pid=78) INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,264,384 tokens",
            StageUpdate("kv_cache", 75, "1,264,384 tokens"),
        ),
        (
            # vLLM's v0 engine names the device as the platform spells it: "npu" on Ascend.
            "INFO 03-01 10:00:00 executor_base.py:110] # npu blocks: 5812, # CPU blocks: 512",
            StageUpdate("kv_cache", 75, "5,812 blocks"),
        ),
        (
            "(EngineCore_DP0 pid=77) INFO [gpu_model_runner.py:3000] Graph capturing finished in 12 secs, "
            "took 0.49 GiB",
            StageUpdate("graph_capture", 88, "12 s"),
        ),
        (
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67",
            StageUpdate("graph_capture", 80, ""),
        ),
        (
            "(APIServer pid=1) INFO [api_server.py:1900] Starting vLLM API server 0 on http://127.0.0.1:8000",
            StageUpdate("api_server", 95, "http://127.0.0.1:8000"),
        ),
        ("(APIServer pid=1) INFO:     Application startup complete.", StageUpdate("ready", 100, "")),
        ('INFO:     127.0.0.1:46928 - "POST /v1/completions HTTP/1.1" 200 OK', None),
    ],
)
def test_it_reads_stage_lines_of_several_vllm_versions(line, expected):
    assert read_stage(line) == expected


def test_it_never_moves_backwards_when_dp_ranks_repeat_stages():
    progress = StartupProgress()
    lines = [
        "(EngineCore_DP0 pid=7) INFO GPU KV cache size: 500,000 tokens",
        "(EngineCore_DP0 pid=7) INFO Graph capturing finished in 9 secs, took 0.3 GiB",
        "(EngineCore_DP1 pid=8) INFO GPU KV cache size: 480,000 tokens",
        "Loading safetensors checkpoint shards: 100% Completed | 4/4",
    ]
    updates = [progress.feed(line) for line in lines]
    assert updates[2] is None
    assert updates[3] is None
    assert progress.current.stage == "graph_capture"
    assert progress.kv_cache_tokens == 480_000


def test_every_stage_has_a_title():
    for line in ("Application startup complete.", "GPU KV cache size: 1 tokens"):
        assert read_stage(line).stage in STAGE_TITLES
