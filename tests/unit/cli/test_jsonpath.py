"""`-o jsonpath=TEMPLATE` (panel/cli/jsonpath.py): the evaluator on its own, its parse errors, and `get`
printing through it the same object `-o json` prints."""

import json

import pytest

from panel.cli.jsonpath import JsonPathError, Template
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = {
    "items": [
        {
            "name": "qwen-chat",
            "status": "running",
            "restart_count": 0,
            "npus": [{"node": "sim-a2", "logic_id": 0}, {"node": "sim-a2", "logic_id": 1}],
            "spec": {"engine": {"max-model-len": 4096}, "enforce_eager": True},
        },
        {"name": "embed", "status": "failed", "restart_count": 3, "npus": [], "spec": None},
    ]
}


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        ("{.items[0].name}", "qwen-chat"),
        ("{$.items[1].status}", "failed"),
        ("{.items[*].name}", "qwen-chat embed"),
        ("{.items[-1].name}", "embed"),
        ("{.items[0].npus[*].logic_id}", "0 1"),
        ("{.items[0:1].name}", "qwen-chat"),
        ("{.items[1:].name}", "embed"),
        ("{.items[0].spec['engine']['max-model-len']}", "4096"),
        ('{.items[0].spec.engine["max-model-len"]}', "4096"),
        ("{.items[0].spec.enforce_eager}", "true"),
        ("{.items[1].spec}", "null"),
        ("{.items[0].npus[0]}", '{"node":"sim-a2","logic_id":0}'),
        ('{.items[?(@.status=="running")].name}', "qwen-chat"),
        ("{.items[?(@.status!='running')].name}", "embed"),
        ("{.items[?(@.restart_count==3)].name}", "embed"),
        ("{.items[?(@.restart_count==0.0)].name}", "qwen-chat"),
        ("{.items[?(@.spec==null)].name}", "embed"),
        ("{..logic_id}", "0 1"),
        ("{.items[*].npus[*].node}", "sim-a2 sim-a2"),
        ('{.items[0].name}{"\\t"}{.items[0].status}{"\\n"}', "qwen-chat\trunning\n"),
        ("name={.items[0].name} status={.items[0].status}", "name=qwen-chat status=running"),
        # Missing fields and indexes print nothing, as kubectl's do.
        ("{.items[0].nope}", ""),
        ("{.items[9].name}", ""),
        ("{.items[0].name.first}", ""),
    ],
)
def test_it_evaluates(template, printed):
    assert Template(template).render(LIST) == printed


def test_true_is_not_one_and_a_number_is_not_its_text():
    data = {"items": [{"n": 1, "b": True, "s": "1"}]}
    assert Template("{.items[?(@.n==1)].s}").render(data) == "1"
    assert Template("{.items[?(@.b==1)].s}").render(data) == ""
    assert Template('{.items[?(@.n=="1")].s}').render(data) == ""
    assert Template("{.items[?(@.b==true)].n}").render(data) == "1"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{.items[}", "the [ at character 8 is not closed"),
        ("{.items", "the { at character 1 is not closed"),
        ("{}", "empty braces at character 1"),
        ("{.a.}", "a field name is missing at character 5"),
        ("{.a[x]}", "[x] at character 4"),
        ("{.a}}", "unexpected } at character 5"),
        ("{.a[?(@.b>1)]}", "a filter compares with == or !="),
        ("{.a[?(b==1)]}", "a filter compares a field of @"),
        ("{.a[?(@.b==[1])]}", "a single value"),
        ("{range .items[*]}{.name}{end}", "{range} … {end} is not supported"),
        ("name", "no expression in braces"),
        ("{status}", "a path starts with . or $"),
        ('{"\\x"}', "unknown escape \\x"),
    ],
)
def test_a_template_it_cannot_read_is_an_error_that_says_where(template, message):
    with pytest.raises(JsonPathError) as raised:
        Template(template)
    assert message in str(raised.value)


def test_get_prints_jsonpath_of_the_list_as_items_and_of_one_deployment(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment(), deployment(id=8, name="embed"))))
    assert main(["get", "deployments", "-o", "jsonpath={.items[*].name}"]) == 0
    assert capsys.readouterr().out == "qwen-chat embed\n"
    assert main(["get", "deployments", "qwen-chat", "-o", "jsonpath={.status} {.npus[*].logic_id}"]) == 0
    assert capsys.readouterr().out == "running 0 1\n"


def test_jsonpath_reads_the_object_json_prints(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    assert main(["get", "deployments", "-o", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main(["get", "deployments", "-o", "jsonpath={.items[0]}"]) == 0
    assert json.loads(capsys.readouterr().out) == printed["items"][0]


def test_a_bad_template_exits_2_before_anything_is_sent(api, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["get", "deployments", "-o", "jsonpath={.items[}"])
    assert exit.value.code == 2
    assert "bad jsonpath template: the [ at character 8 is not closed" in capsys.readouterr().err
    assert api.requests == []
