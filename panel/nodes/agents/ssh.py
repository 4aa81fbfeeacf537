"""SSH nodes: credentials checked and sealed, the host key confirmed by the admin, and the task route that
sends their operations to the central agent with everything it needs to reach them.

The central agent's key (panel_central_key) is derived one way from the panel's key material; a node's SSH
secret, sealed at rest with that material, is sealed again for the central key each time a task carries it,
so the central agent opens it without the material."""

import ipaddress
import json
import re
from functools import lru_cache

import asyncssh
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.core.domain.choices import NodeTransport
from panel.core.infra.secrets import decrypt, encrypt, key_material
from workers.hosts import SshConnectError, fetch_host_key_fingerprint
from workers.hosts.ssh_connect import normalize_fingerprint
from workers.hosts.sync_loop import run_coroutine_sync
from workers.identity import central_key
from workers.sealing import seal_for_node
from workers.task_names import SSH_RUNNER_QUEUE, node_queue

HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
FINGERPRINT_TIMEOUT_S = 10


def check_address(address: str) -> str:
    address = (address or "").strip()
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        pass
    if not HOSTNAME.match(address):
        raise ValidationError(
            {"address": [_("Give a host name or an IP address, e.g. 10.0.0.12 or npu-01.example.")]}
        )
    return address


def sealed_credentials(client_key: str = "", password: str = "") -> str:
    """The node's SSH secret, sealed; a key must parse (asyncssh's own reason is shown when it does not)."""
    if client_key:
        try:
            asyncssh.import_private_key(client_key)
        except (asyncssh.KeyImportError, ValueError) as error:
            raise ValidationError(
                {
                    "client_key": [
                        _(
                            "This is not a usable private key (%(reason)s). Paste the whole unencrypted "
                            "OpenSSH or PEM private key, including its BEGIN and END lines."
                        )
                        % {"reason": error}
                    ]
                }
            ) from error
        return encrypt(json.dumps({"client_key": client_key}))
    if password:
        return encrypt(json.dumps({"password": password}))
    raise ValidationError({"client_key": [_("Give a private key or a password to log in with.")]})


def check_env(env) -> dict:
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) and isinstance(v, str)
        for k, v in env.items()
    ):
        raise ValidationError(
            {"ssh_env": [_('Give an object of variable names to text values, e.g. {"PATH": "/usr/bin"}.')]}
        )
    return env


def host_key_fingerprint(address: str, port: int) -> str:
    """The fingerprint the host presents now (nothing is authenticated); raises ValidationError if none."""
    try:
        return run_coroutine_sync(fetch_host_key_fingerprint(address, port, timeout=FINGERPRINT_TIMEOUT_S))
    except SshConnectError as error:
        cause = error.__cause__
        said = (str(cause) or type(cause).__name__) if cause is not None else str(error)
        sentence = _(
            "The panel cannot read the host key of %(address)s:%(port)s; check the address and port and "
            "that sshd runs there."
        ) % {"address": address, "port": port}
        # The sentence first; what the SSH library said second (pages show it as a detail).
        raise ValidationError({"address": [sentence, said]}) from error


def check_fingerprint(text: str) -> str:
    try:
        return normalize_fingerprint(text)
    except ValueError as error:
        raise ValidationError({"fingerprint": [str(error)]}) from error


def panel_central_key() -> bytes:
    """The central agent's key (workers.identity.central_key), as `manage.py agent_credential --central`
    writes it for the central agent."""
    return _central_key(key_material())


@lru_cache(maxsize=4)
def _central_key(material: str) -> bytes:
    return central_key(material)


def sealed_for_central_agent(plaintext: str) -> str:
    return seal_for_node(panel_central_key(), plaintext)


def ssh_target(node) -> dict:
    """What the central agent needs to run a task on this node (workers.remote.SshTarget); the secret stays
    sealed, for the central agent's key (workers.remote.open_secret)."""
    return {
        "node": node.name,
        "address": node.address,
        "port": node.ssh_port,
        "username": node.ssh_username,
        "sealed_secret": sealed_for_central_agent(decrypt(node.ssh_secret)) if node.ssh_secret else "",
        "host_key_fingerprint": node.ssh_host_key_fingerprint,
        "env": node.ssh_env or {},
        "host_root": node.ssh_host_root or "/",
        "ascend_root": node.ssh_ascend_root or "/usr/local/Ascend",
    }


def task_route(node) -> tuple[str, dict]:
    """(queue, extra task kwargs) for an operation on node: its agent's queue, or the central agent."""
    if node.transport == NodeTransport.SSH:
        return SSH_RUNNER_QUEUE, {"target": ssh_target(node)}
    return node_queue(node.name), {}
