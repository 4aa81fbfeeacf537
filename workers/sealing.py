"""Secrets sealed with a key the panel and the central agent share (Fernet: AES-128-CBC + HMAC-SHA256).

The panel stores SSH keys and passwords sealed; a task for an SSH node carries the sealed text unchanged, and
only the central agent that runs it (holding the same key) opens it. Neither the database nor the broker ever
holds the plaintext. Django-free so the agent can use it; panel.core.secrets wraps it with the settings.
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
            "print(Fernet.generate_key().decode())'`) on the panel and on the central agent"
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
            "a stored secret cannot be decrypted with this key: the panel and the central agent must share "
            "the same PANEL_SECRETS_KEY (or, without it, the same SECRET_KEY); if the key was changed, enter "
            "the node's SSH key or password again"
        ) from error


def key_material_from_env(environ=os.environ) -> str:
    """The agent side's key: PANEL_SECRETS_KEY (or a file named by PANEL_SECRETS_KEY_FILE), else SECRET_KEY,
    the same order the panel's settings use."""
    path = environ.get("PANEL_SECRETS_KEY_FILE", "")
    if path:
        with open(path) as handle:
            return handle.read().strip()
    return environ.get("PANEL_SECRETS_KEY", "") or environ.get("SECRET_KEY", "")


# Engine API keys travel to a node's agent sealed with a key derived from that node's credential (or the
# central key), so neither the operation row nor the broker holds them in the clear.
NODE_SEAL_PURPOSE = "ascend-panel engine key v1"


def seal_for_node(node_key: bytes, plaintext: str) -> str:
    return seal(f"{NODE_SEAL_PURPOSE}:{node_key.decode()}", plaintext)


def open_for_node(node_key: bytes, sealed: str) -> str:
    return unseal(f"{NODE_SEAL_PURPOSE}:{node_key.decode()}", sealed)
