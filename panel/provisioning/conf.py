"""Provisioning settings (panel/settings.py reads them from the environment): PANEL_PIP_INDEX_URL,
PANEL_PIP_EXTRA_INDEX_URLS, PANEL_URL."""

from pathlib import Path

from django.conf import settings


def _setting(name: str) -> str:
    return str(getattr(settings, name) or "")


def pip_index_url() -> str:
    """The internal pip index nodes install from ("" = pip's default, PyPI)."""
    return _setting("PANEL_PIP_INDEX_URL")


def pip_extra_index_urls() -> list[str]:
    return [url for url in _setting("PANEL_PIP_EXTRA_INDEX_URLS").split(",") if url.strip()]


def public_url() -> str:
    """The panel's address as agents reach it ("" = the address of the request that started the work)."""
    return _setting("PANEL_URL").rstrip("/")


def packages_dir() -> Path:
    return Path(settings.DATA_DIR) / "packages"
