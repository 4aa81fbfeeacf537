"""`apply -f DIR` (and `plan -f DIR`): every *.yaml, *.yml and *.json spec file of a folder, in name order,
its subfolders only with -R; each spec reported, a failed one not stopping the others, exit 1 when any
failed; a folder with an unreadable file or a name given twice sends nothing (exit 2)."""

import json

import pytest

from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment


def applied(result, name, **extra) -> dict:
    return {"result": result, "dry_run": False, "changes": [], "effect": "none",
            "deployment": deployment(name=name), "plan": {}, "warnings": [], **extra}  # fmt: skip


def put_path(name: str) -> str:
    return f"/api/v1/deployments/{name}/"


@pytest.fixture
def folder(tmp_path):
    """b-embed.yml, a-chat.yaml (two specs), c-rerank.json, notes.txt, .hidden.yaml and sub/d-deep.yaml."""
    root = tmp_path / "deploy"
    (root / "sub").mkdir(parents=True)
    (root / "b-embed.yml").write_text("name: embed\nmodel: bge-m3\n")
    (root / "a-chat.yaml").write_text("name: chat\nmodel: qwen\n---\nname: chat-small\nmodel: qwen-0.5b\n")
    (root / "c-rerank.json").write_text(json.dumps({"name": "rerank", "model": "bge-reranker"}))
    (root / "notes.txt").write_text("not a spec")
    (root / ".hidden.yaml").write_text("name: [broken")  # an editor's file: left out
    (root / "sub" / "d-deep.yaml").write_text("name: deep\nmodel: qwen\n")
    return root


def answer_all(api, names, result="unchanged"):
    for name in names:
        api.on("PUT", put_path(name), Answer(200, applied(result, name)))


def test_a_folder_applies_its_spec_files_in_name_order_and_not_its_subfolders(api, folder, capsys):
    answer_all(api, ["chat", "chat-small", "embed", "rerank", "deep"])
    assert main(["apply", "-f", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "chat: unchanged",
        "chat-small: unchanged",
        "embed: unchanged",
        "rerank: unchanged",
    ]
    assert [request.path for request in api.requests] == [
        put_path("chat"),
        put_path("chat-small"),
        put_path("embed"),
        put_path("rerank"),
    ]
    assert api.sent("PUT", put_path("rerank"))[0].body == {"name": "rerank", "model": "bge-reranker"}


def test_r_takes_the_subfolders_too_after_the_files_beside_them(api, folder, capsys):
    answer_all(api, ["chat", "chat-small", "embed", "rerank", "deep"])
    assert main(["apply", "-R", "-f", str(folder), "--idempotency-key", "run-7"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "deep: unchanged"
    keys = [request.headers["Idempotency-Key"] for request in api.requests]
    assert keys == ["run-7/chat", "run-7/chat-small", "run-7/embed", "run-7/rerank", "run-7/deep"]


def test_a_failed_spec_is_reported_the_others_are_applied_and_the_exit_code_is_1(api, folder, capsys):
    answer_all(api, ["chat", "rerank"])
    refused = {
        "detail": "The spec is invalid.",
        "errors": {"placement.npus": ["Only 1 NPU is free on sim-a2."]},
    }
    api.on("PUT", put_path("chat-small"), Answer(400, refused))
    api.on(
        "PUT", put_path("embed"), Answer(409, {"detail": "A rolling update of this deployment is under way."})
    )
    assert main(["apply", "-f", str(folder)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["chat: unchanged", "rerank: unchanged"]
    assert captured.err.splitlines() == [
        f"error: chat-small ({folder / 'a-chat.yaml'}): The spec is invalid.",
        "  placement.npus: Only 1 NPU is free on sim-a2.",
        f"error: embed ({folder / 'b-embed.yml'}): A rolling update of this deployment is under way.",
        "2 of 4 specs failed: chat-small, embed",
    ]
    assert len(api.requests) == 4  # every spec was tried


def test_json_output_holds_each_answer_and_each_failure(api, folder, capsys):
    answer_all(api, ["chat", "chat-small", "rerank"])
    api.on(
        "PUT",
        put_path("embed"),
        Answer(400, {"detail": "The spec is invalid.", "errors": {"x": ["Unknown."]}}),
    )
    assert main(["apply", "-f", str(folder), "-o", "json"]) == 1
    answers = json.loads(capsys.readouterr().out)
    assert [answer.get("result") for answer in answers] == ["unchanged", "unchanged", None, "unchanged"]
    assert answers[2] == {
        "name": "embed",
        "source": str(folder / "b-embed.yml"),
        "error": {
            "detail": "The spec is invalid.",
            "exit_code": 1,
            "status": 400,
            "errors": {"x": ["Unknown."]},
        },
    }


def test_a_refused_token_stops_at_the_first_spec(api, folder, capsys):
    api.on("PUT", put_path("chat"), Answer(401, {"detail": "Invalid, expired or revoked API token."}))
    assert main(["apply", "-f", str(folder)]) == 1
    assert capsys.readouterr().err == "error: Invalid, expired or revoked API token.\n"
    assert len(api.requests) == 1


def test_a_panel_out_of_reach_stops_at_the_first_spec(api, folder, monkeypatch, capsys):
    monkeypatch.setenv("ASCEND_PANEL_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert main(["apply", "-f", str(folder)]) == 1
    assert capsys.readouterr().err.count("Cannot reach the panel") == 1


def test_all_timed_out_exits_3(api, tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("name: a\nmodel: m\n")
    (tmp_path / "b.yaml").write_text("name: b\nmodel: m\n")
    for name in ("a", "b"):
        api.on("PUT", put_path(name), Answer(408, {"detail": f"{name} was not running within 1s."}))
    assert main(["apply", "-f", str(tmp_path), "--wait", "--timeout", "1s"]) == 3
    assert "2 of 2 specs failed: a, b" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"a.yaml": "name: x\nmodel: m\n", "b.yaml": "name: x\nmodel: n\n"},
            "a.yaml and {root}/b.yaml both name x",
        ),
        ({"a.yaml": "name: x\nmodel: m\n", "b.yaml": "name: [unclosed"}, "b.yaml is not valid YAML"),
        ({"a.yaml": "name: x\nmodel: m\n", "b.json": "[1, 2]"}, "b.json: a spec is a mapping"),
        ({"notes.txt": "hello"}, "holds no *.yaml, *.yml or *.json file"),
    ],
)
def test_a_folder_with_a_bad_file_sends_nothing(api, tmp_path, capsys, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert main(["apply", "-f", str(tmp_path)]) == 2
    assert message.format(root=tmp_path) in capsys.readouterr().err
    assert api.requests == []


def test_plan_takes_a_folder_too(api, folder, capsys):
    review = {"fits": True, "chip": "910b", "plan": {}, "warnings": [], "nodes": []}
    api.on("POST", "/api/v1/deployments/plan/", Answer(200, review))
    assert main(["plan", "-f", str(folder), "-R"]) == 0
    names = [request.body["name"] for request in api.sent("POST", "/api/v1/deployments/plan/")]
    assert names == ["chat", "chat-small", "embed", "rerank", "deep"]
    assert capsys.readouterr().out.splitlines()[0] == "chat: fits (910b)"


def test_one_spec_that_fails_still_ends_as_before(api, tmp_path, capsys):
    (tmp_path / "one.yaml").write_text("name: one\nmodel: m\n")
    api.on("PUT", put_path("one"), Answer(400, {"detail": "The spec is invalid."}))
    assert main(["apply", "-f", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "error: The spec is invalid.\n"


def test_a_spec_of_a_folder_that_waits_for_its_models_inspection_goes_on_after_it(api, tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("name: a\npath: /data/models/new\nplacement: {node: sim-a2, npus: 1}\n")
    (tmp_path / "b.yaml").write_text("name: b\nmodel: m\n")
    operation = "0b6f3c1e-0000-4000-8000-000000000001"
    waiting = applied("waiting", "a", inspection=operation, deployment=None)
    api.on("PUT", put_path("a"), Answer(202, waiting), Answer(201, applied("created", "a")))
    api.on("GET", f"/api/v1/operations/{operation}/", Answer(200, {"status": "running"}),
           Answer(200, {"status": "succeeded"}))  # fmt: skip
    api.on("PUT", put_path("b"), Answer(200, applied("unchanged", "b")))
    assert main(["apply", "-f", str(tmp_path), "--wait", "--idempotency-key", "k"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"a: waiting for the inspection of its model (operation {operation})",
        "a: inspected; applying",
        "a: created",
        "a: running",
        "b: unchanged",
        "b: running",
    ]
    keys = [request.headers["Idempotency-Key"] for request in api.requests if request.method == "PUT"]
    assert keys == ["k/a", "k/a/inspected", "k/b"]
