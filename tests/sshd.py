"""A real OpenSSH server on loopback for SSH tests (key-only auth, its own host key and config).

Import the fixture explicitly in a test module: `sshd_server = tests.sshd.sshd_server`.
Needs Debian's openssh-server (/usr/sbin/sshd) and ssh-keygen; tests are skipped with the reason otherwise.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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


def _write_config(workdir: Path, port: int, username: str) -> Path:
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


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory):
    ssh_keygen = shutil.which("ssh-keygen")
    if not os.path.exists(SSHD) or ssh_keygen is None:
        pytest.skip(f"{SSHD} or ssh-keygen is missing: install Debian's openssh-server to run SSH tests")
    if os.geteuid() == 0:
        # sshd refuses to start as root without its privilege separation directory, which systemd
        # normally creates when the packaged service starts.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    workdir = tmp_path_factory.mktemp("sshd")
    username = getpass.getuser()
    _keygen(ssh_keygen, workdir / "host_key")
    _keygen(ssh_keygen, workdir / "client_key")
    (workdir / "authorized_keys").write_text((workdir / "client_key.pub").read_text())
    port = _free_port()
    config = _write_config(workdir, port, username)
    subprocess.run([SSHD, "-t", "-f", str(config)], check=True, capture_output=True)

    log_path = workdir / "sshd.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        _wait_until_listening(process, port, log_path)
        yield SshdServer(
            host="127.0.0.1",
            port=port,
            username=username,
            client_key_pem=(workdir / "client_key").read_text(),
            host_public_key_path=workdir / "host_key.pub",
            workdir=workdir,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
