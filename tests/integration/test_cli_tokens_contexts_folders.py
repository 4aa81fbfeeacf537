"""The real `ascend-panel` against a real web server (tests/live_web.py) for what issue 23 added besides
labels: `create token` and `create key` (the panel's POST /api/v1/tokens/, its permission checks, and a
key the gateway takes for its deployment only), contexts after a real sign-in, and `apply -f DIR`
through the real planner."""

from datetime import timedelta

import httpx
import pytest
import yaml
from django.utils import timezone

from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.deployments.models import Deployment
from tests.integration.cli_live import Cli
from tests.integration.test_deployment_apply import npu_node, tiny  # noqa: F401  fixtures, used by name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture
def cli(live_web, tmp_path):
    return Cli(live_web.url, tmp_path / "config")


def as_user(user, name="cli", **limits) -> dict:
    return {"ASCEND_PANEL_URL": "", "ASCEND_PANEL_TOKEN": ApiToken.issue(user, name, **limits)[1]}


def env_for(cli, user, name="cli", **limits) -> dict:
    return {**as_user(user, name, **limits), "ASCEND_PANEL_URL": cli.url}


def test_create_token_prints_a_working_token_once_with_the_scope_and_expiry_asked(cli, charlie):
    done = cli.run(
        "create", "token", "nightly", "--scope", "deploy", "--expires", "2d", **env_for(cli, charlie)
    )
    assert done.returncode == 0, done.stderr
    raw = done.stdout.strip()
    assert done.stdout == f"{raw}\n"
    assert raw.startswith("ap_")
    assert "It is shown once" in done.stderr
    token = ApiToken.objects.get(user=charlie, name="nightly")
    assert token.scopes == ["deploy"]
    assert timedelta(days=2) - timedelta(minutes=1) < token.expires - timezone.now() <= timedelta(days=2)
    nodes = httpx.get(f"{cli.url}/api/v1/nodes/", headers={"Authorization": f"Bearer {raw}"})
    assert nodes.status_code == 200


def test_a_deploy_token_may_not_create_tokens(cli, bob):
    done = cli.run("create", "token", "more", **env_for(cli, bob, "ci", scopes=["deploy"]))
    assert done.returncode == 1
    assert "scopes do not reach this endpoint" in done.stderr
    assert not ApiToken.objects.filter(name="more").exists()


def test_a_token_may_not_give_more_than_it_has(cli, bob):
    soon = timezone.now() + timedelta(days=1)
    done = cli.run(
        "create", "token", "longer", "--expires", "30d", **env_for(cli, bob, "short", expires=soon)
    )
    assert done.returncode == 1
    assert "expires: The new token must expire no later than this one" in done.stderr


def test_create_key_makes_a_gateway_key_for_one_deployment_only(cli, bob):
    model = Model.objects.create(name="key-model")
    Deployment.objects.create(name="chat-a", model=model, spec={"parts": [], "served_model_name": "qwen-a"})
    Deployment.objects.create(name="chat-b", model=model, spec={"parts": []})
    done = cli.run("create", "key", "app", "--deployment", "chat-a", "--rpm", "30", **env_for(cli, bob))
    assert done.returncode == 0, done.stderr
    raw = done.stdout.strip()
    assert "for chat-a: base URL " in done.stderr
    assert "/v1, model qwen-a." in done.stderr
    key = ApiToken.objects.get(user=bob, name="app")
    assert (key.scopes, key.allowed_models, key.requests_per_minute) == (["inference"], ["qwen-a"], 30)

    headers = {"Authorization": f"Bearer {raw}"}
    models = httpx.get(f"{cli.url}/v1/models", headers=headers)
    assert models.status_code == 200, models.text
    assert [model["id"] for model in models.json()["data"]] == ["qwen-a"]  # not chat-b's
    assert httpx.get(f"{cli.url}/api/v1/nodes/", headers=headers).status_code == 403  # the gateway only

    missing = cli.run("create", "key", "app2", "--deployment", "nope", **env_for(cli, bob, "cli2"))
    assert missing.returncode == 1
    assert not ApiToken.objects.filter(name="app2").exists()


def test_contexts_after_a_real_sign_in(cli, bob):
    login = cli.run(
        "login", cli.url, "-u", "bob", "--password-stdin", "--context", "live", input="bob-password\n"
    )
    assert login.returncode == 0, login.stderr
    assert login.stdout.endswith("as context live.\n")
    path = cli.home / "ascend-panel" / "config.yaml"
    stored = yaml.safe_load(path.read_text())
    stored["contexts"]["broken"] = {"url": "http://127.0.0.1:9", "token": "ap_x"}
    stored["current-context"] = "broken"
    path.write_text(yaml.safe_dump(stored))
    path.chmod(0o600)

    assert cli.run("nodes", "ls").returncode == 1  # the current context's panel is not there
    picked = cli.run("--context", "live", "nodes", "ls", "-o", "name")
    assert picked.returncode == 0, picked.stderr
    assert cli.run("nodes", "ls", "--context", "live").returncode == 0
    assert cli.run("config", "use-context", "live").returncode == 0
    assert cli.run("nodes", "ls").returncode == 0
    listed = cli.run("config", "get-contexts")
    assert [line.split()[:2] for line in listed.stdout.splitlines()[1:]] == [["broken", "http://127.0.0.1:9"],
                                                                             ["*", "live"]]  # fmt: skip


def test_apply_a_folder_through_the_real_planner(cli, bob, tiny, tmp_path):  # noqa: F811
    folder = tmp_path / "deploy"
    folder.mkdir()
    good = {"name": "ci-good", "model": "tiny-qwen", "placement": {"node": "npu-a", "npus": 1},
            "engine": {"max_model_len": 1024}, "labels": {"app": "chat"}}  # fmt: skip
    bad = {**good, "name": "ci-bad", "placement": {"node": "npu-a", "npus": 16}}
    (folder / "a-good.yaml").write_text(yaml.safe_dump(good))
    (folder / "b-bad.yaml").write_text(yaml.safe_dump(bad))
    (folder / "c-bad-label.json").write_text(
        yaml.safe_dump({**good, "name": "ci-label", "labels": {"a b": "c"}})
    )

    done = cli.run("apply", "-f", str(folder), "--dry-run", **env_for(cli, bob))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == "ci-good: created (dry run)"
    assert f"error: ci-bad ({folder / 'b-bad.yaml'}): " in done.stderr
    assert "placement: npu-a has 4 free NPUs; 16 are asked for." in done.stderr
    assert f"error: ci-label ({folder / 'c-bad-label.json'}): " in done.stderr
    assert done.stderr.count("Label key “a b”") == 1  # the field error, said once
    assert done.stderr.rstrip().endswith("2 of 3 specs failed: ci-bad, ci-label")
    assert not Deployment.objects.exists()
