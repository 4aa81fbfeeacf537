"""The real `ascend-panel` CLI as a subprocess against a live panel (web server, worker, beat, an agent on a
simulated A2 host) for what the panel has today: login, nodes, models, get, wait, logs, chat, delete. The
apply pipeline is tests/e2e/test_cli_pipeline.py."""

import json
import stat
import time

import pytest
import yaml

from tests.integration.cli_live import (
    MODEL,
    SIM_NODE,
    Cli,
    deployment_port,
    free_npu,
    ready_model,
    wait_until,
)

NAME = "cli-chat"


@pytest.fixture(scope="module")
def panel(request):
    return request.getfixturevalue("browser_tier_panel")


@pytest.fixture
def cli(panel, tmp_path):
    return Cli(panel.url, tmp_path / "config")


def test_login_with_a_password_stores_a_private_token_the_other_commands_use(cli):
    done = cli.login("bob")
    path = cli.home / "ascend-panel" / "config.yaml"
    assert (
        done.stdout == f"Signed in to {cli.url} as bob; the token is stored in {path} as context default.\n"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = yaml.safe_load(path.read_text())
    assert stored["current-context"] == "default"
    assert (stored["contexts"]["default"]["url"], stored["contexts"]["default"]["username"]) == (
        cli.url,
        "bob",
    )
    assert "bob-password" not in path.read_text()

    nodes = cli.run("nodes", "ls")
    assert nodes.returncode == 0, nodes.stderr
    header, *rows = nodes.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "STATUS", "ADDRESS"]
    assert any(row.split()[:2] == [SIM_NODE, "online"] for row in rows)

    models = cli.run("models", "ls", "-o", "json")
    assert models.returncode == 0, models.stderr
    assert MODEL in [m["name"] for m in json.loads(models.stdout)]


def test_a_wrong_password_exits_1_with_the_panels_sentence_and_stores_nothing(cli):
    done = cli.run("login", cli.url, "-u", "bob", "--password-stdin", input="guess\n")
    assert done.returncode == 1
    assert done.stderr == "error: Wrong user name or password.\n"
    assert not (cli.home / "ascend-panel").exists()


def test_a_given_token_is_checked_and_stored(cli, panel):
    with panel.api("charlie") as client:
        token = client.post("/api/v1/tokens/", json={"name": "cli-test"}).raise_for_status().json()["token"]
    assert cli.run("login", cli.url, "--token", "ap_not-a-token").returncode == 1
    done = cli.run("login", cli.url, "--token", token)
    assert done.returncode == 0, done.stderr
    assert cli.run("nodes", "ls", "-o", "name").stdout.split() == [SIM_NODE]


def test_the_environment_serves_a_ci_job_that_never_logs_in(cli, panel):
    with panel.api("charlie") as client:
        token = client.post("/api/v1/tokens/", json={"name": "cli-env"}).raise_for_status().json()["token"]
    done = cli.run("nodes", "ls", "-o", "name", ASCEND_PANEL_URL=cli.url, ASCEND_PANEL_TOKEN=token)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [SIM_NODE]
    revoked = cli.run("nodes", "ls", ASCEND_PANEL_URL=cli.url, ASCEND_PANEL_TOKEN=token + "x")
    assert revoked.returncode == 1
    assert revoked.stderr == "error: Invalid, expired or revoked API token.\n"
    assert cli.run("nodes", "ls").returncode == 2  # neither a file nor the variables: say how to log in


def test_a_deployment_waited_for_listed_read_asked_and_deleted_through_the_cli(cli, panel):
    cli.login("bob")
    with panel.api("bob") as client:
        model = ready_model(client)
        created = client.post(
            "/api/v1/deployments/",
            json={
                "name": NAME,
                "model": model["id"],
                "artifact": next(a["id"] for a in model["artifacts"] if a["ready"]),
                "nodes": [{"node": SIM_NODE, "npus": [free_npu(client)]}],
                "max_model_len": 1024,
                "port": deployment_port(),
            },
        )
        assert created.status_code == 201, created.text

    waited = cli.run("wait", NAME, "--for", "running", "--timeout", "3m")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == f"{NAME}: running\n"

    listed = cli.run("get", "deployments")
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(NAME + " "))
    assert row[:3] == [NAME, "running", MODEL]
    one = json.loads(cli.run("get", "deployments", NAME, "-o", "json").stdout)
    assert (one["name"], one["status"], one["id"]) == (NAME, "running", created.json()["id"])
    assert cli.run("get", "deployments", "-o", "name").stdout.split().count(NAME) == 1

    logs = cli.run("logs", NAME)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip(), "a running deployment has log lines"
    stamped = cli.run("logs", NAME, "--timestamps").stdout.splitlines()
    assert all(f" {SIM_NODE} " in line for line in stamped)

    answer = cli.run("chat", NAME, "Say hello", "--max-tokens", "8")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip()
    streamed = cli.run("chat", NAME, "Say hello", "--max-tokens", "8", "--stream")
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout.strip()
    body = json.loads(cli.run("chat", NAME, "Say hello", "--max-tokens", "8", "-o", "json").stdout)
    assert body["choices"][0]["message"]["content"]

    viewer = Cli(cli.url, cli.home.parent / "charlie")
    viewer.login("charlie")
    assert viewer.run("get", "deployments", NAME, "-o", "name").stdout == f"{NAME}\n"
    refused = viewer.run("chat", NAME, "Say hello")
    assert (refused.returncode, refused.stderr) == (1, "error: The playground needs the operator role.\n")

    late = cli.run("wait", NAME, "--for", "stopped", "--timeout", "2s")
    assert late.returncode == 3
    assert f"{NAME} did not reach stopped within 2s (it is running)." in late.stderr

    follower = cli.start("logs", NAME, "--follow")
    time.sleep(2)  # it has printed what there is and polls for more
    assert follower.poll() is None
    deleted = cli.run("delete", NAME, "--wait", "--timeout", "2m")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"{NAME}: deleted\n"
    out, err = follower.communicate(timeout=30)  # a followed deployment that is deleted ends the command
    assert follower.returncode == 0, err
    assert out.strip()

    gone = cli.run("get", "deployments", NAME)
    assert (gone.returncode, gone.stderr) == (1, f"error: No deployment named '{NAME}'.\n")
    assert cli.run("wait", NAME, "--for", "deleted").returncode == 0
    assert cli.run("delete", NAME).returncode == 1
    assert cli.run("delete", NAME, "--ignore-not-found").returncode == 0
    with panel.api("bob") as client:
        wait_until(lambda: free_npu(client) is not None, 30, "the NPU was not given back")
