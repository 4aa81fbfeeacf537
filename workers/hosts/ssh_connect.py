"""Opening SSH connections with a pinned host key, and the per-process pool that reuses them.

The host key is never looked up in ~/.ssh/known_hosts: the panel stores each node's fingerprint after the
admin confirmed it, and that fingerprint alone decides whether a connection is trusted.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import asyncssh

log = logging.getLogger(__name__)

# asyncssh reads ~/.ssh/known_hosts when known_hosts is empty; an explicit "no trusted keys" answer makes
# every host key go through HostKeyCheck.validate_host_public_key instead.
NO_KNOWN_HOSTS: tuple[list, list, list] = ([], [], [])
FINGERPRINT_PREFIX = "SHA256:"


class SshConnectError(Exception):
    """Could not open a usable SSH connection to the host."""


class SshAuthError(SshConnectError):
    """The host refused the login."""


class HostKeyNotPinned(SshConnectError):
    """No fingerprint was confirmed for this host; .actual is what it presented."""

    def __init__(self, host: str, port: int, actual: str):
        self.actual = actual
        super().__init__(
            f"{host}:{port} presented host key {actual}, but no fingerprint has been confirmed for it; "
            "show this fingerprint to the admin, store it once confirmed, then connect again"
        )


class HostKeyMismatch(SshConnectError):
    """The host presented a different key than the one confirmed for it."""

    def __init__(self, host: str, port: int, expected: str, actual: str):
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"host key of {host}:{port} is {actual}, but {expected} was confirmed for it; nothing was run. "
            "If the host was reinstalled or its keys regenerated, confirm the new fingerprint in the node's "
            "settings; otherwise the connection may be intercepted"
        )


def normalize_fingerprint(fingerprint: str) -> str:
    """'SHA256:abc' as ssh-keygen -lf prints it; a bare base64 digest gets the prefix added."""
    fingerprint = fingerprint.strip()
    if fingerprint.upper().startswith(FINGERPRINT_PREFIX):
        fingerprint = fingerprint[len(FINGERPRINT_PREFIX) :]
    if not fingerprint or ":" in fingerprint or " " in fingerprint:
        raise ValueError(
            f"host key fingerprint {fingerprint!r} is not a SHA256 fingerprint; give it as "
            "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints it, e.g. SHA256:Xy12..."
        )
    return FINGERPRINT_PREFIX + fingerprint


class HostKeyCheck(asyncssh.SSHClient):
    """Accepts the host key only if it matches the pinned fingerprint (or, when asked, any key once)."""

    def __init__(self, expected: str | None, trust_on_first_use: bool):
        self.expected = expected
        self.trust_on_first_use = trust_on_first_use
        self.seen: str | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.seen = key.get_fingerprint("sha256")
        if self.expected is None:
            return self.trust_on_first_use
        return hmac.compare_digest(self.seen, self.expected)


@dataclass(frozen=True)
class ConnectParams:
    host: str
    port: int
    username: str
    client_key: asyncssh.SSHKey | None
    password: str | None
    known_host_fingerprint: str | None
    trust_on_first_use: bool
    keepalive_interval: float
    connect_timeout: float

    @property
    def target(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"


async def open_connection(params: ConnectParams) -> tuple[asyncssh.SSHClientConnection, str]:
    """A new authenticated connection and the fingerprint of the host key it accepted."""
    check = HostKeyCheck(params.known_host_fingerprint, params.trust_on_first_use)
    try:
        connection = await asyncssh.connect(
            params.host,
            params.port,
            username=params.username,
            client_factory=lambda: check,
            known_hosts=NO_KNOWN_HOSTS,
            client_keys=[params.client_key] if params.client_key is not None else None,
            password=params.password,
            # Only the credentials the panel gave: no agent, no ~/.ssh keys or config, no Kerberos.
            agent_path=None,
            config=[],
            gss_host=None,
            x509_trusted_certs=None,
            keepalive_interval=params.keepalive_interval,
            connect_timeout=params.connect_timeout,
        )
    except asyncssh.HostKeyNotVerifiable as error:
        if check.seen is None:
            raise SshConnectError(f"cannot verify the host key of {params.target}: {error}") from error
        if params.known_host_fingerprint is None:
            raise HostKeyNotPinned(params.host, params.port, check.seen) from error
        raise HostKeyMismatch(params.host, params.port, params.known_host_fingerprint, check.seen) from error
    except asyncssh.PermissionDenied as error:
        method = " and ".join(
            name
            for name, given in (("key", params.client_key), ("password", params.password))
            if given is not None
        )
        raise SshAuthError(
            f"{params.target} refused the login by {method} ({error.reason}); check the user name, that the "
            "panel's public key is in that user's authorized_keys, or the password"
        ) from error
    except (OSError, TimeoutError, asyncssh.Error) as error:
        raise SshConnectError(
            f"cannot connect to {params.target}: {error or type(error).__name__}; check the address and "
            "port, that sshd runs there, and that a firewall lets the panel through"
        ) from error
    log.info("connected to %s (host key %s)", params.target, check.seen)
    return connection, check.seen or ""


async def fetch_host_key_fingerprint(host: str, port: int = 22, *, timeout: float = 10) -> str:
    """The SHA256 fingerprint of the host key `host` presents, as ssh-keygen -lf prints it.

    Nothing is authenticated or run; the panel shows this to the admin to confirm before pinning it.
    """
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(host, port, config=[]), timeout)
    except (OSError, TimeoutError, asyncssh.Error) as error:
        raise SshConnectError(
            f"cannot fetch the host key of {host}:{port}: {error or type(error).__name__}; check the address "
            "and port and that sshd runs there"
        ) from error
    if key is None:
        raise SshConnectError(f"{host}:{port} completed the handshake without presenting a host key")
    return key.get_fingerprint("sha256")


# One pool per process: key -> task opening (or having opened) the connection. A connection belongs to the
# event loop it was opened on, so the loop is part of the key.
PoolKey = tuple[asyncio.AbstractEventLoop, str, int, str, str | None]
_pool: dict[PoolKey, asyncio.Task] = {}


def _usable(task: asyncio.Task) -> bool:
    if not task.done():
        return True
    if task.cancelled() or task.exception() is not None:
        return False
    connection, _ = task.result()
    return not connection.is_closed()


async def pooled_connection(
    key: tuple[str, int, str, str | None],
    connect: Callable[[], Coroutine[Any, Any, tuple[asyncssh.SSHClientConnection, str]]],
) -> tuple[asyncssh.SSHClientConnection, str]:
    """The pooled connection for key on this loop, opened with connect() when there is none or it died.

    Concurrent callers share one connection attempt; a failed attempt is not kept, so the next call retries.
    """
    loop = asyncio.get_running_loop()
    _forget_closed_loops()
    pool_key = (loop, *key)
    task = _pool.get(pool_key)
    if task is None or not _usable(task):
        task = loop.create_task(connect())
        _pool[pool_key] = task
    try:
        return await asyncio.shield(task)
    except BaseException:
        if task.done() and _pool.get(pool_key) is task:
            del _pool[pool_key]
        raise


async def discard_connection(
    key: tuple[str, int, str, str | None], connection: asyncssh.SSHClientConnection | None = None
) -> None:
    """Close and forget the pooled connection for key on this loop, if any; given `connection`, only if
    the pool still holds that one (a fresh connection another caller opened meanwhile is kept)."""
    pool_key = (asyncio.get_running_loop(), *key)
    task = _pool.get(pool_key)
    if task is None:
        return
    if connection is not None and not (task.done() and _holds(task, connection)):
        return
    del _pool[pool_key]
    await _close_task(task)


def _holds(task: asyncio.Task, connection: asyncssh.SSHClientConnection) -> bool:
    return not task.cancelled() and task.exception() is None and task.result()[0] is connection


async def close_all() -> None:
    """Close every pooled connection: those of this loop now, those of other live loops soon after."""
    current = asyncio.get_running_loop()
    tasks = list(_pool.items())
    _pool.clear()
    for (loop, *_), task in tasks:
        if loop is current:
            await _close_task(task)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_close_when_done, task)


async def _close_task(task: asyncio.Task) -> None:
    if not task.done():
        task.cancel()
    results = await asyncio.gather(task, return_exceptions=True)
    if isinstance(results[0], tuple):
        connection, _ = results[0]
        connection.close()
        await connection.wait_closed()


def _close_when_done(task: asyncio.Task) -> None:
    if not task.done():
        task.cancel()
    elif not task.cancelled() and task.exception() is None:
        task.result()[0].close()


def _forget_closed_loops() -> None:
    # Connections of a loop that was closed (e.g. an asyncio.run() that returned) can never be used again.
    for key in [key for key in _pool if key[0].is_closed()]:
        del _pool[key]


os.register_at_fork(after_in_child=_pool.clear)
