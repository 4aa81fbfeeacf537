"""Secrets at rest (SSH keys, passwords): sealed with PANEL_SECRETS_KEY, or a key derived from SECRET_KEY.

The key material is the panel's alone: a task carries a secret sealed again for the agent that runs it
(workers.sealing.seal_for_node), the central agent included, so no agent needs it.
"""

from django.conf import settings

from workers.sealing import SecretUnreadable, seal, unseal

__all__ = ["SecretUnreadable", "decrypt", "encrypt", "key_material"]


def key_material() -> str:
    return settings.PANEL_SECRETS_KEY or settings.SECRET_KEY


def encrypt(plaintext: str) -> str:
    return seal(key_material(), plaintext)


def decrypt(sealed: str) -> str:
    return unseal(key_material(), sealed)
