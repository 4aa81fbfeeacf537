"""The copy's host key pin computes fingerprints as ssh-keygen does and keeps only the confirmed key."""

import shutil
import subprocess

import pytest

from workers.models.host_keys import offered_keys, sha256_fingerprint

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")


def test_fingerprints_are_those_ssh_keygen_prints(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    public = (tmp_path / "k.pub").read_text()
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert sha256_fingerprint(public.split()[1]) == listed.stdout.split()[1]


def test_keyscan_comments_and_garbage_are_skipped(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    kind, blob = (tmp_path / "k.pub").read_text().split()[:2]
    output = f"# 10.0.0.2:22 SSH-2.0-OpenSSH_9.2\n[10.0.0.2]:2222 {kind} {blob}\n[10.0.0.2]:2222 ssh-rsa !!\n"
    assert offered_keys(output) == {sha256_fingerprint(blob): f"{kind} {blob}"}
