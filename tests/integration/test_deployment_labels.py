"""Labels on deployments: set by the spec (`labels:`), shown by the API and the spec export, compared by
apply (a change of labels alone restarts nothing), refused whole when a key or value breaks the Kubernetes
rules, and selected by `?labels=` (k=v, k!=v, k, !k, commas for AND) — also by `ascend-panel get
deployments -l` against a real web server."""

import pytest

from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.deployments.models import Deployment
from tests.conftest import api_client_for
from tests.integration.cli_live import Cli
from tests.integration.test_deployment_apply import npu_node, pending, put, running, spec, tiny  # noqa: F401

pytestmark = pytest.mark.django_db

LABELS = {"app": "chat", "example.com/team": "search", "tier": "prod"}


@pytest.fixture
def client(bob):
    return api_client_for(bob)


def test_apply_sets_labels_the_api_and_the_spec_export_show_them(client, tiny):  # noqa: F811
    created = put(client, "ci-qwen", spec(labels=LABELS))
    assert created.status_code == 201, created.json()
    assert created.json()["deployment"]["labels"] == LABELS
    assert Deployment.objects.get(name="ci-qwen").labels == LABELS
    running("ci-qwen")

    assert client.get("/api/v1/deployments/ci-qwen/").json()["labels"] == LABELS
    exported = client.get("/api/v1/deployments/ci-qwen/?format=spec").json()
    assert exported["labels"] == LABELS
    again = put(client, "ci-qwen", exported)
    assert (again.status_code, again.json()["result"]) == (200, "unchanged")


def test_a_spec_without_labels_exports_none_and_stays_unchanged(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec())
    running("ci-qwen")
    exported = client.get("/api/v1/deployments/ci-qwen/?format=spec").json()
    assert "labels" not in exported
    assert client.get("/api/v1/deployments/ci-qwen/").json()["labels"] == {}
    assert put(client, "ci-qwen", spec()).json()["result"] == "unchanged"


def test_changing_labels_alone_restarts_nothing_and_a_rollback_brings_them_back(client, bob, tiny):  # noqa: F811
    from panel.deployments.spec.undo import undo

    put(client, "ci-qwen", spec(labels={"app": "chat", "tier": "dev"}))
    running("ci-qwen")

    dry = put(client, "ci-qwen", spec(labels={"app": "chat", "tier": "prod"}), dry_run="true")
    assert (dry.status_code, dry.json()["effect"]) == (202, "none")
    assert Deployment.objects.get(name="ci-qwen").labels["tier"] == "dev"

    changed = put(client, "ci-qwen", spec(labels={"app": "chat", "tier": "prod"}))
    assert changed.status_code == 202, changed.json()
    body = changed.json()
    assert (body["result"], body["effect"], body["rollout"]) == ("changed", "none", None)
    assert body["changes"] == [
        {"field": "labels", "from": {"app": "chat", "tier": "dev"}, "to": {"app": "chat", "tier": "prod"}}
    ]
    assert body["deployment"]["labels"] == {"app": "chat", "tier": "prod"}
    deployment = Deployment.objects.get(name="ci-qwen")
    assert deployment.observed_state == "running"
    assert (pending("deploy"), pending("stop")) == ([], [])

    cleared = put(client, "ci-qwen", spec())
    removed = {"field": "labels", "from": {"app": "chat", "tier": "prod"}, "to": {}}
    assert cleared.json()["changes"] == [removed]
    assert Deployment.objects.get(name="ci-qwen").labels == {}

    undo(Deployment.objects.get(name="ci-qwen"), bob)
    assert Deployment.objects.get(name="ci-qwen").labels == {"app": "chat", "tier": "prod"}
    assert (pending("deploy"), pending("stop")) == ([], [])


def test_labels_and_a_new_replica_count_scale(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec(placement={"node": "npu-a", "npus": 1}, engine={"max_model_len": 2048}))
    running("ci-qwen")
    answer = put(
        client,
        "ci-qwen",
        spec(placement={"node": "npu-a", "npus": 1}, replicas=2, labels={"app": "chat"}),
    )
    assert answer.status_code == 202, answer.json()
    assert answer.json()["effect"] == "scale"
    assert {change["field"] for change in answer.json()["changes"]} == {"replicas", "labels"}
    assert Deployment.objects.get(name="ci-qwen").labels == {"app": "chat"}
    assert Deployment.objects.get(name="ci-qwen-r2").labels == {}  # replicas are found by their primary


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        ({"App Name": "chat"}, ["App Name", "1 to 63 characters"]),
        ({"-app": "chat"}, ["-app", "beginning and ending"]),
        ({"a" * 64: "chat"}, ["a" * 64, "1 to 63 characters"]),
        ({"Example.com/app": "chat"}, ["Example.com", "DNS subdomain"]),
        ({"/app": "chat"}, ["prefix", "empty"]),
        ({"app": "x" * 100}, ["x" * 100, "1 to 63 characters"]),
        ({"app": "chat bot"}, ["chat bot"]),
        ({"version": 2}, ["version", 'quote it: "2"']),
        ({"canary": True}, ["canary", 'quote it: "true"']),
        (["app=chat"], ["mapping"]),
    ],
)
def test_a_bad_label_is_refused_naming_it_and_nothing_is_created(client, tiny, labels, words):  # noqa: F811
    answer = put(client, "ci-qwen", spec(labels=labels))
    assert answer.status_code == 400, answer.json()
    messages = " ".join(answer.json()["errors"]["labels"])
    for word in words:
        assert word in messages, messages
    assert not Deployment.objects.exists()


def test_a_bad_label_on_a_running_deployment_changes_nothing(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec(labels={"app": "chat"}))
    running("ci-qwen")
    answer = put(client, "ci-qwen", spec(labels={"app": "y" * 64}))
    assert answer.status_code == 400
    assert Deployment.objects.get(name="ci-qwen").labels == {"app": "chat"}  # not cut, not half-written


@pytest.fixture
def labelled(db):
    model = Model.objects.create(name="label-model")
    rows = {
        "chat-prod": {"app": "chat", "tier": "prod", "example.com/team": "search"},
        "chat-dev": {"app": "chat", "tier": "dev"},
        "chat-canary": {"app": "chat", "tier": "prod", "canary": ""},
        "embed": {"app": "embed", "tier": "dev", "gpu_pool.a": "x"},
        "bare": {},
    }
    for name, labels in rows.items():
        Deployment.objects.create(name=name, model=model, spec={"parts": []}, labels=labels)
    return rows


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("app=chat", ["chat-canary", "chat-dev", "chat-prod"]),
        ("app==chat", ["chat-canary", "chat-dev", "chat-prod"]),
        ("app=chat,tier!=dev", ["chat-canary", "chat-prod"]),
        ("tier!=dev", ["bare", "chat-canary", "chat-prod"]),  # a missing key is "not dev"
        ("canary", ["chat-canary"]),
        ("app,!canary", ["chat-dev", "chat-prod", "embed"]),
        ("example.com/team=search", ["chat-prod"]),
        ("gpu_pool.a", ["embed"]),
        ("canary=", ["chat-canary"]),  # an empty value is a value
        (" app = embed , tier = dev ", ["embed"]),
        ("app=nothing", []),
    ],
)
def test_the_list_selects_by_labels(bob, labelled, selector, names):
    answer = api_client_for(bob).get("/api/v1/deployments/", {"labels": selector})
    assert answer.status_code == 200, answer.json()
    assert sorted(d["name"] for d in answer.json()["results"]) == names


@pytest.mark.parametrize(
    ("selector", "words"),
    [
        ("app=chat,", ["empty requirement"]),
        ("app in (chat,embed)", ["Set-based", "key=value"]),
        ("App Name=chat", ["App Name"]),
        ("app=chat bot", ["chat bot"]),
        ("app=a=b", ["more than one operator"]),
        ("!", ["may not be empty"]),
        ("x" * 5000, ["4096"]),
    ],
)
def test_a_bad_selector_is_a_400_naming_labels(bob, labelled, selector, words):
    answer = api_client_for(bob).get("/api/v1/deployments/", {"labels": selector})
    assert answer.status_code == 400, answer.content
    body = answer.json()
    messages = " ".join(body["errors"]["labels"])
    for word in words:
        assert word in messages, messages


# --- the CLI against a real web server ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_get_deployments_l_selects_and_show_labels_prints_them(live_web, charlie, labelled, tmp_path):
    cli = Cli(live_web.url, tmp_path / "config")
    env = {"ASCEND_PANEL_URL": live_web.url, "ASCEND_PANEL_TOKEN": ApiToken.issue(charlie, "labels")[1]}

    selected = cli.run("get", "deployments", "-l", "app=chat,tier!=dev", "-o", "name", **env)
    assert selected.returncode == 0, selected.stderr
    assert selected.stdout.split() == ["chat-canary", "chat-prod"]

    table = cli.run("get", "deployments", "--selector", "app=embed", "--show-labels", **env)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[-1] == "LABELS"
    assert row.split()[0] == "embed"
    assert row.split()[-1] == "app=embed,gpu_pool.a=x,tier=dev"

    nothing = cli.run("get", "deployments", "-l", "app=nothing", **env)
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (0, "", "No deployments.\n")

    bad = cli.run("get", "deployments", "-l", "app in (chat)", **env)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: "), bad.stderr
    assert "labels: Set-based selectors (key in (a,b)) are not supported" in bad.stderr


def test_a_dry_run_spec_keeps_the_labels_so_a_diff_shows_only_what_changes(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec(labels=LABELS))
    running("ci-qwen")
    dry = put(client, "ci-qwen", spec(labels=LABELS, engine={"max_model_len": 1024}), dry_run="true")
    assert dry.status_code == 202, dry.json()
    assert [change["field"] for change in dry.json()["changes"]] == ["engine.max_model_len"]
    assert dry.json()["spec"]["labels"] == LABELS
    created = put(client, "ci-new", spec(labels=LABELS), dry_run="true")
    assert created.json()["spec"]["labels"] == LABELS
