"""Secrets at rest (SSH keys, passwords): sealed with PANEL_SECRETS_KEY, or a key derived from SECRET_KEY.

The central agent that runs SSH nodes' tasks opens them with the same key (workers.sealing), so set
PANEL_SECRETS_KEY on both when SECRET_KEY is not shared with it.
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
