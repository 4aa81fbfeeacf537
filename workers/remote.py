"""Tasks for nodes without an agent: the central agent (`python -m workers.agent --central`, queue
ssh-runner) runs them over SSH, building the Runner from the target carried in the task's kwargs.

The target carries the node's SSH secret sealed for the central agent (workers.sealing.seal_for_node, with
a key derived from the central key): the central agent opens it with its own credential, so the broker holds
no plaintext and the central agent needs none of the panel's key material. Remote commands can get extra
environment (say PATH for tools outside the login PATH) and the host's file roots, both set per node in the
panel.
"""

import asyncio
import json

from pydantic import BaseModel, Field

from workers.hosts import Runner, SshRunner
from workers.identity import CENTRAL, signing_key
from workers.sealing import open_for_node


class SshTarget(BaseModel):
    node: str
    address: str
    port: int = Field(default=22, ge=1, le=65535)
    username: str
    sealed_secret: str
    host_key_fingerprint: str
    env: dict[str, str] = Field(default_factory=dict)
    host_root: str = "/"
    ascend_root: str = "/usr/local/Ascend"


def open_secret(sealed: str, central_key: bytes | None = None) -> dict:
    """{"client_key": PEM} or {"password": text} from a node's secret as its task carries it, sealed for
    the central agent (by default with this process's central key)."""
    return json.loads(open_for_node(central_key or signing_key(CENTRAL), sealed))


# OpenSSH's sshd allows 10 sessions per connection (MaxSessions) and refuses more: the toolkit runs probes
# concurrently, so commands over one pooled connection queue for a slot below that.
MAX_COMMANDS_IN_FLIGHT = 8


class RemoteRunner(Runner):
    """An SSH node's runner: fixed environment added to every command (a command's own env wins), and at
    most MAX_COMMANDS_IN_FLIGHT commands at once. Make one per event loop (the limit belongs to it)."""

    def __init__(self, inner: Runner, env: dict[str, str]):
        self.inner = inner
        self.env = dict(env)
        self._slots = asyncio.Semaphore(MAX_COMMANDS_IN_FLIGHT)

    def __repr__(self) -> str:
        return f"RemoteRunner({self.inner!r})"

    async def _execute(self, argv, *, env, **kwargs):
        async with self._slots:
            return await self.inner._execute(argv, env={**self.env, **env}, **kwargs)

    async def read_text(self, path):
        async with self._slots:
            return await self.inner.read_text(path)

    async def start_detached(self, argv, *, env=None, cwd=None, log_path):
        merged = {**self.env, **(env or {})}
        return await self.inner.start_detached(argv, env=merged, cwd=cwd, log_path=log_path)

    async def is_alive(self, pid):
        return await self.inner.is_alive(pid)

    async def signal(self, pid, sig):
        await self.inner.signal(pid, sig)

    async def close(self):
        await self.inner.close()


def ssh_runner(target: SshTarget) -> Runner:
    secret = open_secret(target.sealed_secret)
    runner = SshRunner(
        target.address,
        target.port,
        target.username,
        client_key=secret.get("client_key"),
        password=secret.get("password"),
        known_host_fingerprint=target.host_key_fingerprint,
    )
    return RemoteRunner(runner, target.env)
