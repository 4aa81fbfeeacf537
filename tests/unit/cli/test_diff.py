"""`diff -f FILE|DIR` against a local server answering as the API documents: a unified diff of the live spec
and the one the panel's dry run answers, and kubectl diff's exit codes (0 same, 1 different, 2 error)."""

import pytest
import yaml

from panel.cli.main import main
from tests.unit.cli.api_server import Answer

PUT = "/api/v1/deployments/qwen-chat/"
LIVE = {
    "name": "qwen-chat",
    "model": "qwen2.5-7b-instruct",
    "artifact": 12,
    "placement": {"node": "sim-a2", "npus": [0, 1]},
    "engine": {"max_model_len": 4096, "dtype": "auto"},
    "replicas": 1,
    "runtime": "process",
    "state": "running",
}


def dry_run(result, spec, changes=(), effect="none"):
    return {"result": result, "dry_run": True, "effect": effect, "changes": list(changes), "spec": spec}


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "qwen-chat.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "qwen-chat", "model": "qwen2.5-7b-instruct", "engine": {"max_model_len": 8192}}
        )
    )
    return str(path)


def test_a_change_prints_a_unified_diff_and_exits_1(api, spec_file, capsys):
    merged = {**LIVE, "engine": {"max_model_len": 8192, "dtype": "auto"}}
    change = {"field": "engine.max_model_len", "from": 4096, "to": 8192}
    api.on("PUT", PUT, Answer(202, dry_run("changed", merged, [change], "rolling")))
    api.on("GET", PUT, Answer(200, LIVE))
    assert main(["diff", "-f", spec_file]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[:2] == ["--- live/qwen-chat", "+++ merged/qwen-chat"]
    assert "-  max_model_len: 4096\n+  max_model_len: 8192\n" in captured.out
    assert captured.err == ""
    (sent,) = api.sent("PUT", PUT)
    assert sent.query == {"dry_run": "true"}
    assert sent.body["engine"] == {"max_model_len": 8192}
    assert api.sent("GET", PUT)[0].query == {"format": "spec"}


def test_nothing_to_change_prints_nothing_and_exits_0(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(200, dry_run("unchanged", LIVE)))
    api.on("GET", PUT, Answer(200, LIVE))
    assert main(["diff", "-f", spec_file]) == 0
    assert capsys.readouterr().out == ""


def test_a_new_deployment_diffs_against_nothing(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(201, dry_run("created", LIVE, effect="create")))
    assert main(["diff", "-f", spec_file]) == 1  # GET answers 404: not there yet
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["--- live/qwen-chat", "+++ merged/qwen-chat", "@@ -0,0 +1,14 @@"]
    assert "+name: qwen-chat" in out
    assert all(line.startswith("+") for line in out[3:])


def test_a_change_the_spec_does_not_show_is_named_on_stderr_and_exits_1(api, spec_file, capsys):
    launch = {"field": "launch", "from": None, "to": None}
    api.on("PUT", PUT, Answer(202, dry_run("changed", LIVE, [launch], "rolling")))
    api.on("GET", PUT, Answer(200, LIVE))
    assert main(["diff", "-f", spec_file]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "qwen-chat: changed: launch (rolling), which the spec does not show\n"


def test_a_folder_is_every_spec_file_in_it_in_name_order(api, tmp_path, capsys):
    folder = tmp_path / "deploy"
    folder.mkdir()
    (folder / "b.yaml").write_text(yaml.safe_dump({"name": "qwen-chat", "model": "qwen2.5-7b-instruct"}))
    (folder / "a.json").write_text('{"name": "embed", "model": "bge-m3"}')
    (folder / "notes.txt").write_text("not a spec")
    (folder / "sub").mkdir()
    (folder / "sub" / "c.yaml").write_text("name: elsewhere\n")
    embed = {**LIVE, "name": "embed", "model": "bge-m3"}
    api.on("PUT", "/api/v1/deployments/embed/", Answer(200, dry_run("unchanged", embed)))
    api.on("GET", "/api/v1/deployments/embed/", Answer(200, embed))
    api.on("PUT", PUT, Answer(200, dry_run("unchanged", LIVE)))
    api.on("GET", PUT, Answer(200, LIVE))
    assert main(["diff", "-f", str(folder)]) == 0
    assert [r.path for r in api.requests if r.method == "PUT"] == ["/api/v1/deployments/embed/", PUT]


def test_a_refused_spec_exits_2_with_the_field(api, spec_file, capsys):
    refused = {
        "detail": "The spec is invalid.",
        "errors": {"engine.max_model_len": ["Too long for the model."]},
    }
    api.on("PUT", PUT, Answer(400, refused))
    assert main(["diff", "-f", spec_file]) == 2
    assert (
        capsys.readouterr().err
        == "error: The spec is invalid.\n  engine.max_model_len: Too long for the model.\n"
    )


@pytest.mark.parametrize("setup", ["missing file", "empty folder", "no panel", "old panel"])
def test_every_error_exits_2(api, spec_file, tmp_path, monkeypatch, capsys, setup):
    source = spec_file
    if setup == "missing file":
        source = str(tmp_path / "nope.yaml")
    elif setup == "empty folder":
        (tmp_path / "empty").mkdir()
        source = str(tmp_path / "empty")
    elif setup == "no panel":
        monkeypatch.setenv("ASCEND_PANEL_URL", "http://127.0.0.1:9")
    else:
        api.on("PUT", PUT, Answer(200, {"result": "unchanged", "dry_run": True, "changes": []}))
    assert main(["diff", "-f", source]) == 2
    assert capsys.readouterr().err.startswith("error: ")
