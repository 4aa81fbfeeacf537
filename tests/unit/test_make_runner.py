"""make_runner, SshRunner's argument checks, and the remote command strings (no server needed)."""

from __future__ import annotations

import shlex
import subprocess

import asyncssh
import pytest

from workers.hosts import LocalRunner, SshRunner, make_runner
from workers.hosts.ssh import detached_command, remote_command
from workers.hosts.ssh_connect import normalize_fingerprint

CLIENT_KEY = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
FINGERPRINT = "SHA256:" + "b" * 43


def ssh_spec(**overrides) -> dict:
    spec = {
        "transport": "ssh",
        "address": "10.0.0.5",
        "port": 2222,
        "username": "deploy",
        "client_key": CLIENT_KEY,
        "host_key_fingerprint": FINGERPRINT,
    }
    spec.update(overrides)
    return spec


def test_it_makes_a_local_runner():
    assert isinstance(make_runner({"transport": "local"}), LocalRunner)


def test_it_makes_an_ssh_runner_from_a_node_spec():
    runner = make_runner(ssh_spec())

    assert isinstance(runner, SshRunner)
    assert repr(runner) == "SshRunner(deploy@10.0.0.5:2222)"


def test_it_rejects_an_unknown_transport():
    with pytest.raises(ValueError, match="transport must be 'local' or 'ssh', got 'telnet'"):
        make_runner({"transport": "telnet"})


def test_it_names_missing_ssh_fields():
    with pytest.raises(ValueError, match="ssh transport needs address, username"):
        make_runner(ssh_spec(address="", username=None))


def test_it_wants_a_key_or_a_password():
    with pytest.raises(ValueError, match="client_key .* or password"):
        make_runner(ssh_spec(client_key=None))


def test_it_explains_a_client_key_that_is_not_a_key():
    with pytest.raises(ValueError, match="client_key is not a usable private key"):
        make_runner(ssh_spec(client_key="-----BEGIN OPENSSH PRIVATE KEY-----\nnonsense\n"))


def test_the_repr_never_shows_secrets():
    runner = make_runner(ssh_spec(password="hunter2"))

    assert "hunter2" not in repr(runner)
    assert "PRIVATE" not in repr(runner)


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        (" SHA256:abc+/12 ", "SHA256:abc+/12"),
        ("abc+/12", "SHA256:abc+/12"),
        ("sha256:abc", "SHA256:abc"),
    ],
)
def test_fingerprints_are_normalized_to_ssh_keygen_form(given, normalized):
    assert normalize_fingerprint(given) == normalized


def test_an_md5_fingerprint_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="ssh-keygen -lf"):
        normalize_fingerprint("MD5:12:34:56")


def run_in_sh(command: str, tmp_path) -> subprocess.CompletedProcess:
    # What sshd does with the command string: hand it to the login shell with -c.
    return subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=False)


def test_the_remote_command_reports_its_pid_then_runs_argv_verbatim(tmp_path):
    hostile = ["printf", "%s|", "$(touch pwned)", "`touch pwned`", "a'b", "; touch pwned", "*"]

    done = run_in_sh(remote_command(hostile, {"A_B": "x y; touch pwned"}, str(tmp_path)), tmp_path)

    first, _, rest = done.stdout.partition("\n")
    assert first.startswith("__runner_pid__=")
    assert rest == "$(touch pwned)|`touch pwned`|a'b|; touch pwned|*|"
    assert not (tmp_path / "pwned").exists()


def test_the_remote_command_applies_env_and_cwd(tmp_path):
    command = remote_command(["sh", "-c", 'echo "$MODE"; pwd'], {"MODE": "it's on"}, str(tmp_path))

    assert run_in_sh(command, "/").stdout.splitlines()[1:] == ["it's on", str(tmp_path)]


def test_the_detached_command_prints_a_pid_and_quotes_the_log_path(tmp_path):
    log_path = tmp_path / "a log; rm -rf x.log"
    command = detached_command(["echo", "hello"], {}, None, str(log_path))

    done = run_in_sh(command, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().isdigit()
    assert shlex.quote(str(log_path)) in command
