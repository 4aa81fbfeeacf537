"""Run commands on a host: LocalRunner for this machine, SshRunner for a node reached over SSH."""

from __future__ import annotations

from workers.hosts.base import CommandError, CommandResult, Runner
from workers.hosts.local import LocalRunner
from workers.hosts.ssh import (
    HostKeyMismatch,
    HostKeyNotPinned,
    SshAuthError,
    SshConnectError,
    SshRunner,
    close_all,
    fetch_host_key_fingerprint,
)

__all__ = [
    "CommandError",
    "CommandResult",
    "HostKeyMismatch",
    "HostKeyNotPinned",
    "LocalRunner",
    "Runner",
    "SshAuthError",
    "SshConnectError",
    "SshRunner",
    "close_all",
    "fetch_host_key_fingerprint",
    "make_runner",
]


def make_runner(spec: dict) -> Runner:
    """A Runner from a node's transport settings.

    spec is {"transport": "local"} or {"transport": "ssh", "address", "port", "username",
    "client_key" and/or "password", "host_key_fingerprint"}.
    """
    transport = spec.get("transport")
    if transport == "local":
        return LocalRunner()
    if transport == "ssh":
        missing = [field for field in ("address", "username") if not spec.get(field)]
        if missing:
            raise ValueError(f"ssh transport needs {', '.join(missing)}: set it in the node's settings")
        return SshRunner(
            spec["address"],
            int(spec.get("port") or 22),
            spec["username"],
            client_key=spec.get("client_key") or None,
            password=spec.get("password") or None,
            known_host_fingerprint=spec.get("host_key_fingerprint") or None,
        )
    raise ValueError(f"transport must be 'local' or 'ssh', got {transport!r}")
