"""Engines are not open: each deployment's engines listen with an API key only the panel knows.

The key is made at the first launch and kept sealed in the deployment's row (panel.core.infra.secrets). A
launch or benchmark message carries it sealed again for the node that runs it (workers.sealing.seal_for_node),
which passes it to vLLM as VLLM_API_KEY. The panel's own callers (the gateway, the playground) send it as
`Authorization: Bearer <key>`; vLLM asks for it on /v1/* only, so the reconcile loop's /health and /metrics
probes need none.
"""

import secrets
from functools import lru_cache

from panel.core.infra.secrets import decrypt, encrypt
from panel.nodes.agents.trust import task_signing_key
from workers.sealing import seal_for_node

ENGINE_KEY_PREFIX = "ek_"


def ensure_engine_key(deployment) -> str:
    """The deployment's key, made (and set on the row, for the caller's save) the first time."""
    if not deployment.engine_key:
        deployment.engine_key = encrypt(ENGINE_KEY_PREFIX + secrets.token_urlsafe(32))
    return engine_key_of(deployment)


def engine_key_of(deployment) -> str:
    """The plaintext key, or "" for a deployment launched before engines had keys."""
    return opened(deployment.engine_key) if deployment.engine_key else ""


@lru_cache(maxsize=1024)
def opened(sealed: str) -> str:
    # Cached: the gateway needs the key on every request, and the sealed text of a key never changes.
    return decrypt(sealed)


def sealed_for_node(deployment, node) -> str:
    """The key sealed for the agent that runs `node`'s part (or "" when the deployment has none)."""
    plaintext = engine_key_of(deployment)
    return seal_for_node(task_signing_key(node), plaintext) if plaintext else ""


def auth_headers(deployment) -> dict[str, str]:
    key = engine_key_of(deployment)
    return {"Authorization": f"Bearer {key}"} if key else {}
