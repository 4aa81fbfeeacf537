"""Secrets sealed with Fernet (AES-128-CBC + HMAC-SHA256): at rest with the panel's key material, on the way
with a key derived from the credential of the agent that opens them.

The panel stores SSH keys and passwords, engine keys and join tokens sealed with its key material
(PANEL_SECRETS_KEY, panel.core.infra.secrets), which no agent holds. A task carries a secret sealed again for
the agent that runs it (seal_for_node): with a key derived one way from that node's credential, or from the
central key for an SSH node's task, which the central agent runs. Neither the database nor the broker ever
holds the plaintext, and an agent's credential opens what is sealed for it only. Django-free so the agent
can use it.
"""

import base64
import binascii
import os

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HKDF_INFO = b"ascend-panel secrets v1"


class SecretKeyMissing(RuntimeError):
    """No key to seal or open secrets with."""


class SecretUnreadable(ValueError):
    """Sealed text that this key cannot open (another key, or corrupted)."""


def _is_fernet_key(material: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(material.encode())) == 32
    except (binascii.Error, ValueError):
        return False


def fernet_for(material: str) -> Fernet:
    """A Fernet from a Fernet key as `Fernet.generate_key()` prints it, or derived from any other secret
    string (such as Django's SECRET_KEY) with HKDF-SHA256."""
    if not material:
        raise SecretKeyMissing(
            "no secrets key: set PANEL_SECRETS_KEY (e.g. `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`) on the panel"
        )
    if _is_fernet_key(material):
        return Fernet(material.encode())
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(material.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def seal(material: str, plaintext: str) -> str:
    return fernet_for(material).encrypt(plaintext.encode()).decode()


def unseal(material: str, sealed: str) -> str:
    try:
        return fernet_for(material).decrypt(sealed.encode()).decode()
    except InvalidToken as error:
        raise SecretUnreadable(
            "a secret cannot be decrypted with this key: at rest, the panel's PANEL_SECRETS_KEY (or, without "
            "it, SECRET_KEY) changed, so enter the node's SSH key or password again; on the way, the agent's "
            "credential is not the one the panel sealed it for (write it again with manage.py "
            "agent_credential)"
        ) from error


# The variables that give a process the panel's key material (panel.settings reads them): an agent, the
# central one included, must hold none of them.
PANEL_KEY_MATERIAL_VARS = ("PANEL_SECRETS_KEY", "PANEL_SECRETS_KEY_FILE", "SECRET_KEY", "SECRET_KEY_FILE")


def panel_key_material_in(environ=os.environ) -> list[str]:
    return [name for name in PANEL_KEY_MATERIAL_VARS if environ.get(name, "").strip()]


# What an agent opens (engine API keys, an SSH node's login secret, a join token) travels sealed with a key
# derived from the credential of the agent that runs the node's tasks (the node's own, or the central key),
# so neither the operation row nor the broker holds it in the clear. (The purpose keeps its first name:
# messages already queued still open.)
NODE_SEAL_PURPOSE = "ascend-panel engine key v1"


def seal_for_node(node_key: bytes, plaintext: str) -> str:
    return seal(f"{NODE_SEAL_PURPOSE}:{node_key.decode()}", plaintext)


def open_for_node(node_key: bytes, sealed: str) -> str:
    return unseal(f"{NODE_SEAL_PURPOSE}:{node_key.decode()}", sealed)
