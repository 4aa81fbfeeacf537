"""The address a request came from, as the audit log and the sign-in lockout see it."""

from django.conf import settings


def client_ip(request) -> str | None:
    """REMOTE_ADDR, or with PANEL_TRUSTED_PROXIES = N the address the outermost trusted proxy saw: the N-th
    entry from the right of X-Forwarded-For. Entries left of that were written by the client and are never
    believed (a guesser would otherwise pick a fresh address per try and dodge the lockout)."""
    meta = getattr(request, "META", {}) or {}
    proxies = settings.PANEL_TRUSTED_PROXIES
    if proxies > 0:
        forwarded = [part.strip() for part in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return meta.get("REMOTE_ADDR") or None
