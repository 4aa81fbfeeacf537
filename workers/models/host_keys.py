"""A copy target's SSH host key, pinned to the fingerprint the panel confirmed for that node.

ssh-keyscan fetches the keys the target offers; the one whose SHA256 fingerprint is the confirmed one is
written to a known_hosts file of its own, and rsync's ssh trusts that file alone (StrictHostKeyChecking=yes),
so a target that presents another key when the copy connects is refused by ssh itself, not only here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path

from workers.hosts import LocalRunner
from workers.hosts.ssh_connect import normalize_fingerprint
from workers.i18n import gettext_noop as _
from workers.models.commands import PINNED_HOST_ALIAS

KEYSCAN_TIMEOUT_S = 10


class HostKeyError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def sha256_fingerprint(key_base64: str) -> str:
    """'SHA256:…' of a public key blob, as ssh-keygen -lf prints it."""
    digest = hashlib.sha256(base64.b64decode(key_base64, validate=True)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def offered_keys(keyscan_output: str) -> dict[str, str]:
    """fingerprint -> 'type base64' for each key line of ssh-keyscan's output."""
    keys = {}
    for line in keyscan_output.splitlines():
        fields = line.split()
        if len(fields) < 3 or line.startswith("#"):
            continue
        try:
            keys[sha256_fingerprint(fields[2])] = f"{fields[1]} {fields[2]}"
        except (binascii.Error, ValueError):
            continue
    return keys


def pinned_known_hosts(host: str, port: int, confirmed: str, folder: Path) -> Path:
    """A known_hosts file in folder holding the target's key if it matches the confirmed fingerprint."""
    confirmed = normalize_fingerprint(confirmed)
    scan = LocalRunner().run_sync(
        ["ssh-keyscan", "-T", str(KEYSCAN_TIMEOUT_S), "-p", str(int(port)), host],
        timeout=KEYSCAN_TIMEOUT_S * 3,
    )
    keys = offered_keys(scan.stdout)
    if not keys:
        said = (scan.stderr.strip().splitlines() or ["no answer"])[-1]
        raise HostKeyError(
            f"cannot read the SSH host key of {host}:{port} ({said}); nothing was copied",
            _(
                "Check the target node's address and SSH port, that sshd runs there, and that this node "
                "reaches it through any firewall; then retry."
            ),
        )
    if confirmed not in keys:
        raise HostKeyError(
            f"{host}:{port} presents host key {', '.join(sorted(keys))}, not the confirmed {confirmed}; "
            "nothing was copied",
            _(
                "The target's SSH host key is not the one the panel confirmed. If the target was reinstalled "
                "or its keys regenerated, confirm its new fingerprint (ssh-keygen -lf "
                "/etc/ssh/ssh_host_ed25519_key.pub on the target); otherwise the connection may be "
                "intercepted."
            ),
        )
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"{PINNED_HOST_ALIAS} {keys[confirmed]}\n")
    return known_hosts
