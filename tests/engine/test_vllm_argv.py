"""Every command the panel builds for the CPU profile parses with the installed vLLM's own argument parser.

For each wizard option that applies to a CPU node (dtype, max-model-len, memory share, eager, served name,
port, environment, MTP off, and every allowed extra flag with each of its values) the panel plans the
request as the API would (placement.planning.plan_request) and builds the launch; one script in the
engine venv then runs vLLM's serve parser, its own post-parse checks and EngineArgs over every argv. A flag
the installed vLLM rejects must be refused by the panel first, naming the fix from the version table.
"""

import json
import subprocess

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.errors import InvalidInput
from panel.deployments.placement.planning import plan_request
from panel.nodes.models import Node
from tests.engine.engine_venv import engine_python
from workers.engine.launch.command import API_SERVER_MODULE
from workers.engine.launch.flags import ALLOWED_FLAGS, BOOL, FLOAT, INT, JSON, NAME, PATH
from workers.engine.launch.launch_matrix import load, within

pytestmark = [pytest.mark.engine, pytest.mark.django_db, pytest.mark.timeout(900)]

# Run inside the engine venv: vLLM's serve parser (module moved between releases), then the checks
# `vllm serve` runs right after parsing, then EngineArgs as the server builds it. One line of JSON out.
PARSE_SCRIPT = r"""
import contextlib, io, json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.engine.arg_utils import AsyncEngineArgs

results = []
for argv in json.load(open(sys.argv[1])):
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
            validate_parsed_serve_args(args)
            AsyncEngineArgs.from_cli_args(args)
        results.append(None)
    except SystemExit:
        results.append(errors.getvalue().strip().splitlines()[-1:] or ["exit"])
    except Exception as error:
        results.append([repr(error)])
print("RESULTS " + json.dumps(results))
"""

SAMPLES = {
    "--max-num-seqs": 8,
    "--max-num-batched-tokens": 512,
    "--max-logprobs": 5,
    "--seed": 7,
    "--swap-space": 1,
    "--cpu-offload-gb": 0.5,
    "--tool-call-parser": "hermes",
    "--reasoning-parser": "deepseek_r1",
    "--response-role": "assistant",
    "--additional-config": {"enable_cpu_binding": False},
    "--compilation-config": {"cudagraph_mode": "PIECEWISE"},
    "--speculative-config": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3},
    "--hf-overrides": {"max_position_embeddings": 512},
    "--override-generation-config": {"temperature": 0.5},
    "--limit-mm-per-prompt": {"image": 0},
}
PARTNERS = {"--enable-auto-tool-choice": {"--tool-call-parser": "hermes"}}


@pytest.fixture
def installed_vllm(engine_venv):
    result = subprocess.run(
        [str(engine_python()), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture
def cpu_world(tiny_llama, installed_vllm, tmp_path):
    folder, facts = tiny_llama
    # The inventory records the serving venv's vLLM as "vllm"; the panel checks flags against it.
    node = Node.objects.create(name="cpu-argv", address="127.0.0.1", versions={"vllm": installed_vllm})
    model = Model.objects.create(name="tiny-llama-argv", facts=facts)
    artifact = ModelArtifact.objects.create(model=model, node=node, path=str(folder), ready=True)
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}", encoding="utf-8")
    return {"artifact": artifact, "folder": str(folder), "template": str(template), "vllm": installed_vllm}


def flag_samples(world) -> list[dict]:
    """Each allowed flag with a value of its kind (each value of a choice flag), partners added."""
    cases = []
    for flag, kind in ALLOWED_FLAGS.items():
        if isinstance(kind, tuple):
            values = list(kind)
        elif kind == BOOL:
            values = [True]
        elif kind == PATH:
            values = [world["template"] if flag == "--chat-template" else world["folder"]]
        elif kind in (INT, FLOAT, NAME, JSON):
            values = [SAMPLES[flag]]
        else:
            raise AssertionError(f"no sample for {flag} ({kind})")
        cases += [{flag: value, **PARTNERS.get(flag, {})} for value in values]
    return cases


def request_for(world, **engine):
    return {
        "name": "argv-check",
        "model": world["artifact"].model_id,
        "artifact": world["artifact"].pk,
        "nodes": [{"node": "cpu-argv", "npus": []}],
        **engine,
    }


def vllm_argv(argv: list[str]) -> list[str]:
    """What follows `python -m vllm.entrypoints.openai.api_server`: the serve parser's input."""
    return argv[argv.index(API_SERVER_MODULE) + 1 :]


def parse_all(argvs: list[list[str]], tmp_path) -> list:
    payload = tmp_path / "argvs.json"
    payload.write_text(json.dumps(argvs), encoding="utf-8")
    result = subprocess.run(
        [str(engine_python()), "-c", PARSE_SCRIPT, str(payload)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"},
    )
    line = next((row for row in result.stdout.splitlines() if row.startswith("RESULTS ")), None)
    assert line, result.stderr[-3000:]
    return json.loads(line.removeprefix("RESULTS "))


def wizard_options(world) -> list[dict]:
    options = [{}]
    options += [{"dtype": dtype} for dtype in ("auto", "bfloat16", "float16", "float32")]
    options += [
        {"max_model_len": 256},
        {"gpu_memory_utilization": 0.5},
        {"enforce_eager": True},
        {"served_model_name": "tiny-chat", "port": 9123},
        {"env": {"OMP_NUM_THREADS": "2"}},
        {"mtp_tokens": 0},
    ]
    options += [{"extra_flags": flags} for flags in flag_samples(world)]
    return options


def test_every_cpu_command_the_panel_builds_parses_with_the_installed_vllm(cpu_world, alice, tmp_path):
    built, refused = [], {}
    for engine in wizard_options(cpu_world):
        try:
            planned = plan_request(request_for(cpu_world, **engine), user=alice)
        except InvalidInput as error:
            refused[json.dumps(engine, sort_keys=True)] = error.detail
            continue
        built.append((engine, vllm_argv(planned.as_review()["nodes"][0]["argv"])))
    results = parse_all([argv for _engine, argv in built], tmp_path)
    rejected = {
        json.dumps(engine): (argv, error)
        for (engine, argv), error in zip(built, results, strict=True)
        if error
    }
    assert rejected == {}, f"vLLM {cpu_world['vllm']} rejects commands the panel built"
    # Whatever the panel refused, it refused for this vLLM's version, naming the fix from the table.
    expected = {
        row["flag"]
        for row in load()["flags"]
        if not within(cpu_world["vllm"], row.get("vllm_since"), row.get("vllm_until"))
    }
    refused_flags = {flag for key in refused for flag in json.loads(key).get("extra_flags", {})}
    assert refused_flags == expected, refused
    for detail in refused.values():
        assert "extra_flags" in detail
        assert f"vLLM {cpu_world['vllm']}" in str(detail["extra_flags"][0])
    assert len(built) >= len(ALLOWED_FLAGS)


def test_the_version_tables_flags_agree_with_the_installed_vllm(cpu_world, tmp_path):
    # Outside the panel: the table says which of these the installed vLLM takes; its parser must agree.
    rows = load()["flags"]
    argvs = [
        ["--model", cpu_world["folder"], row["flag"], *(["1"] if row["flag"] == "--swap-space" else [])]
        for row in rows
    ]
    results = parse_all(argvs, tmp_path)
    for row, error in zip(rows, results, strict=True):
        accepted = within(cpu_world["vllm"], row.get("vllm_since"), row.get("vllm_until"))
        assert (error is None) == accepted, (row["flag"], cpu_world["vllm"], error)


def test_the_planned_json_configs_parse_too(cpu_world, tmp_path):
    # What the launch adds on Ascend (binder, EPLB, graph mode, MTP) goes through the same vLLM flags.
    planned = [
        "--additional-config",
        json.dumps(
            {"enable_cpu_binding": False, "eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 16}}
        ),
        "--compilation-config",
        json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"}),
    ]
    assert parse_all([["--model", cpu_world["folder"], *planned]], tmp_path) == [None]
