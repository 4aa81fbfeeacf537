"""Tasks for nodes without an agent: the central agent (`python -m workers.agent --central`, queue
ssh-runner) runs them over SSH, building the Runner from the target carried in the task's kwargs.

The target carries the node's SSH secret sealed (workers.sealing); the central agent opens it with the
key it shares with the panel, so the broker holds no plaintext. Remote commands can get extra environment
(say PATH for tools outside the login PATH) and the host's file roots, both set per node in the panel.
"""

import asyncio
import json

from pydantic import BaseModel, Field

from workers.hosts import Runner, SshRunner
from workers.sealing import key_material_from_env, unseal


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


def open_secret(sealed: str, material: str | None = None) -> dict:
    """{"client_key": PEM} or {"password": text} from a node's sealed secret."""
    return json.loads(unseal(material if material is not None else key_material_from_env(), sealed))


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


def ssh_runner(target: SshTarget, material: str | None = None) -> Runner:
    secret = open_secret(target.sealed_secret, material)
    runner = SshRunner(
        target.address,
        target.port,
        target.username,
        client_key=secret.get("client_key"),
        password=secret.get("password"),
        known_host_fingerprint=target.host_key_fingerprint,
    )
    return RemoteRunner(runner, target.env)
