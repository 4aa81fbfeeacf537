"""A real OpenSSH server on loopback for SSH tests (key-only auth, its own host key and config).

Import the fixture explicitly in a test module: `sshd_server = tests.sshd.sshd_server` (one server for the
session) or `restartable_sshd = tests.sshd.restartable_sshd` (one per test, which it can stop and start).
Needs Debian's openssh-server (/usr/sbin/sshd) and ssh-keygen; tests are skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SshdServer:
    host: str
    port: int
    username: str
    client_key_pem: str
    host_public_key_path: Path
    workdir: Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _keygen(ssh_keygen: str, path: Path) -> None:
    subprocess.run(
        [ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _write_config(workdir: Path, port: int, username: str, extra: tuple[str, ...]) -> Path:
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {workdir / 'host_key'}",
                f"PidFile {workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                f"AllowUsers {username}",
                "StrictModes no",
                "UsePAM no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "LogLevel VERBOSE",
                # The login is this machine's own account, whose shell start-up files (pyenv's rehash, for
                # one) are not the host under test: bash sources ~/.bashrc for an sshd command only as a
                # top-level shell, and a session killed mid-rehash left pyenv's lock behind, which then
                # held every later login for 60 s.
                "SetEnv SHLVL=1",
                *extra,
                "",
            ]
        )
    )
    return config


def _wait_until_listening(process: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S}s")


def _prepare(workdir: Path, extra_config: tuple[str, ...] = ()) -> SshdServer:
    """Keys, authorized_keys and a checked config in workdir, for a server on a free loopback port;
    extra_config lines are added to sshd_config as they are."""
    ssh_keygen = shutil.which("ssh-keygen")
    if not os.path.exists(SSHD) or ssh_keygen is None:
        pytest.skip(f"{SSHD} or ssh-keygen is missing: install Debian's openssh-server to run SSH tests")
    if os.geteuid() == 0:
        # sshd refuses to start as root without its privilege separation directory, which systemd
        # normally creates when the packaged service starts.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    username = getpass.getuser()
    _keygen(ssh_keygen, workdir / "host_key")
    _keygen(ssh_keygen, workdir / "client_key")
    (workdir / "authorized_keys").write_text((workdir / "client_key.pub").read_text())
    port = _free_port()
    config = _write_config(workdir, port, username, extra_config)
    subprocess.run([SSHD, "-t", "-f", str(config)], check=True, capture_output=True)
    return SshdServer(
        host="127.0.0.1",
        port=port,
        username=username,
        client_key_pem=(workdir / "client_key").read_text(),
        host_public_key_path=workdir / "host_key.pub",
        workdir=workdir,
    )


def _launch(server: SshdServer) -> subprocess.Popen:
    log_path = server.workdir / "sshd.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(server.workdir / "sshd_config")],
            stdout=log,
            stderr=log,
        )
    try:
        _wait_until_listening(process, server.port, log_path)
    except RuntimeError:
        _end(process)
        raise
    return process


def _end(process: subprocess.Popen) -> None:
    """Stop the listener and the per-connection sshd processes it forked, which run in sessions of their own
    and outlive a listener that was merely terminated. All are frozen before any is killed: a client that
    reconnects the moment its session ends must not find a listener still accepting, whose new child would
    serve it on after the listener died (a host that went down kept answering)."""
    frozen = _freeze_tree(process.pid)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=10)


def _freeze_tree(pid: int) -> list[int]:
    """SIGSTOP `pid` and its descendants until no new one appears; returns them, children first."""
    frozen: list[int] = []
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)
    while True:
        try:
            found = [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            found = []
        new = [child for child in found if child not in frozen]
        if not new:
            return frozen[::-1]
        for child in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)
            frozen.append(child)


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory):
    server = _prepare(tmp_path_factory.mktemp("sshd"))
    process = _launch(server)
    try:
        yield server
    finally:
        _end(process)


class RestartableSshd:
    """A loopback sshd a test can take away and bring back (same port, same host key). Stopping it ends
    the sessions it serves as well, as a host that went down would."""

    def __init__(self, server: SshdServer):
        self.server = server
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        assert self.process is None, "sshd is running already"
        self.process = _launch(self.server)

    def stop(self) -> None:
        if self.process is not None:
            _end(self.process)
            self.process = None


@pytest.fixture
def sshd_of_two_sessions(tmp_path_factory):
    """A loopback sshd that allows two sessions per connection (OpenSSH's default is 10)."""
    server = _prepare(tmp_path_factory.mktemp("sshd-two-sessions"), ("MaxSessions 2",))
    process = _launch(server)
    try:
        yield server
    finally:
        _end(process)


@pytest.fixture
def restartable_sshd(tmp_path_factory):
    sshd = RestartableSshd(_prepare(tmp_path_factory.mktemp("sshd-restartable")))
    sshd.start()
    try:
        yield sshd
    finally:
        sshd.stop()
