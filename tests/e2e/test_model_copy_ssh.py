"""A model copy between two nodes, run for real: the source node's agent (the in-process worker on a simulated
host) rsyncs a tiny model over SSH to the target, a loopback sshd logged in to as root with a key the sshd
fixture generated (the agent's ASCEND_PANEL_SSH_KEY), the target's host key pinned to the fingerprint the
panel confirmed for it. The files arrive byte for byte and the panel records the target's copy; a wrong host
key, an unknown host key and a closed port each fail with the reason and what to do, and a target without
room (a 1 MiB tmpfs mounted where the copy goes, when this test runs as root) is refused before rsync starts.

What is not real here: both "nodes" are this machine (the source's files under the sim host's root, the
target's at the same path on the real file system), and the target node has no agent of its own — none is
needed for the copy, which only the source's agent runs, but nothing checks the target's copy from there."""

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

import tests.sshd
from tests.integration.conftest import TEST_NODE
from tests.provisioning_helpers import wait_finished
from workers.models.download import DISK_MARGIN_BYTES
from workers.models.host_keys import sha256_fingerprint
from workers.models.tiny import make_tiny_model

sshd_server = tests.sshd.sshd_server
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180), pytest.mark.ssh]


def wait_for(operation, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        operation.refresh_from_db()
        if operation.is_terminal:
            return operation
        time.sleep(0.2)
    raise AssertionError(f"{operation} did not finish in {timeout} s")


def files_of(folder: Path) -> dict[str, tuple[int, str]]:
    """relative path -> (size, sha256) of every file under folder."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free once the socket closes: nothing listens there


@pytest.fixture
def source(celery_worker, sshd_server, settings, monkeypatch, tmp_path):
    """Node A (served by the worker) with a ready tiny model; the agent logs in to others with the sshd's
    client key. The models root is a fresh folder, so the target's copy lands where nothing else is."""
    from panel.catalog.models import Model, ModelArtifact
    from panel.nodes.models import Node

    monkeypatch.setenv("ASCEND_PANEL_SSH_KEY", str(sshd_server.workdir / "client_key"))
    settings.PANEL_MODELS_ROOT = str(tmp_path / "models")
    # The agent's own policy holds that folder too (it checks a copy's source as well as its target).
    monkeypatch.setenv("ASCEND_PANEL_MODELS_ROOT", f"/data/models:{settings.PANEL_MODELS_ROOT}")
    path = f"{settings.PANEL_MODELS_ROOT}/tiny"
    make_tiny_model(celery_worker.sim_root / path.lstrip("/"), arch="qwen2", target_mb=2)
    node = Node.objects.create(name=TEST_NODE, transport="agent")
    model = Model.objects.create(name="tiny-copy", source="path")
    return ModelArtifact.objects.create(model=model, node=node, path=path, ready=True)


def target_node(sshd, name, *, port=None, fingerprint=""):
    """An agent node on this machine's loopback sshd, with the host key the panel confirmed for it."""
    from panel.nodes.models import Node

    return Node.objects.create(
        name=name,
        transport="agent",
        address=sshd.host,
        ssh_port=port or sshd.port,
        ssh_host_key_fingerprint=fingerprint,
    )


def test_a_model_is_copied_over_ssh_byte_for_byte_and_recorded_on_the_target(
    source, sshd_server, celery_worker, bob
):
    from panel.catalog.copies import start_copy
    from panel.catalog.models import ModelArtifact
    from panel.catalog.services import register_model
    from panel.nodes.agents.ssh import host_key_fingerprint

    # The source's own inspection first, as the panel does it: format, facts and size come from the agent.
    ModelArtifact.objects.filter(pk=source.pk).delete()
    model, inspection = register_model(source="local", node=source.node, path=source.path, user=bob)
    assert wait_for(inspection).status == "succeeded", inspection.error
    original = ModelArtifact.objects.get(model=model, node=source.node)
    shown = host_key_fingerprint(sshd_server.host, sshd_server.port)  # what the admin confirmed
    target = target_node(sshd_server, "copy-b", fingerprint=shown)

    # Every event stored, read in the agent's order: its batches leave from several threads, and the one with
    # the last redraw (100 %) may arrive after the one that ends the copy (CI once read 99 as the last).
    copy = wait_finished(start_copy(original, target, bob, target_user=sshd_server.username), timeout=120)

    assert copy.status == "succeeded", (copy.error, copy.hint)
    sent = files_of(celery_worker.sim_root / original.path.lstrip("/"))
    arrived = files_of(Path(original.path))  # the target's file system: this machine's, at the same path
    assert arrived == sent
    assert {"config.json", "model.safetensors"} <= set(arrived)
    total = sum(size for size, _ in sent.values())
    progress = [e.payload for e in copy.events.filter(kind="progress").order_by("attempt", "agent_seq")]
    rsync_reports = [p for p in progress if p["stage"].startswith("Copying to ")]
    assert rsync_reports, progress
    assert rsync_reports[-1]["percent"] == 100
    assert rsync_reports[-1]["bytes_done"] == total
    assert progress[-1]["percent"] == 100
    logged = [e.payload.get("line", "") for e in copy.events.filter(kind="log")]
    assert f"127.0.0.1:{sshd_server.port} presents the confirmed host key {shown}" in logged
    assert not any("%" in line and "/s" in line for line in logged)  # progress went to progress events
    # The target was asked for room first; its models root is not there yet: df answered for the folder above.
    assert any(
        line.startswith("copy-b: ") and f"GiB free at {Path(original.path).parent.parent}" in line
        for line in logged
    ), logged
    copied = ModelArtifact.objects.get(node=target, path=original.path)
    assert copied.model == model
    assert copied.ready
    assert (copied.format, copied.size_bytes) == ("hf", total)
    assert copied.size_bytes == original.size_bytes
    assert copied.facts == original.facts


def test_a_target_presenting_another_host_key_gets_nothing(source, sshd_server, bob):
    from panel.catalog.copies import start_copy

    # A real fingerprint, of a key the target does not hold: as if the address now led elsewhere.
    other_key = (sshd_server.workdir / "client_key.pub").read_text().split()[1]
    target = target_node(sshd_server, "copy-spoofed", fingerprint=sha256_fingerprint(other_key))

    copy = wait_for(start_copy(source, target, bob, target_user=sshd_server.username))

    assert copy.status == "failed"
    assert f"not the confirmed {sha256_fingerprint(other_key)}" in copy.error
    assert "nothing was copied" in copy.error
    assert "intercepted" in copy.hint
    assert not Path(source.path).exists()
    assert not target.artifacts.exists()


@pytest.mark.parametrize(
    ("case", "said", "hint"),
    [
        ("unknown host key", "Host key verification failed", "known_hosts"),
        ("closed port", "Connection refused", "cannot reach the target"),
    ],
)
def test_a_copy_that_cannot_log_in_says_why_and_what_to_do(source, sshd_server, bob, case, said, hint):
    from panel.catalog.copies import start_copy

    # No confirmed fingerprint: the agent user's known_hosts decides, and it does not know this sshd.
    port = closed_port() if case == "closed port" else None
    target = target_node(sshd_server, "copy-unreached", port=port)

    copy = wait_for(start_copy(source, target, bob, target_user=sshd_server.username))

    assert copy.status == "failed"
    # The free-disk question is the first thing that logs in, so ssh's own answer stops the copy there.
    assert copy.error.startswith(f"ssh to {sshd_server.username}@127.0.0.1:{target.ssh_port} failed: ")
    assert copy.error.endswith("; nothing was copied")
    assert said in copy.error
    assert hint in copy.hint
    assert not Path(source.path).exists()
    assert not target.artifacts.exists()


def mount_tmpfs(root: Path, size: str) -> None:
    """A tmpfs of `size` at root (made first). Mounting needs root (CAP_SYS_ADMIN); elsewhere the test is
    skipped."""
    root.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


@pytest.fixture
def full_models_root(source):
    """A 1 MiB tmpfs where the target's models root is (this machine's file system): the 2 MB model and the
    margin cannot fit."""
    root = Path(source.path).parent
    mount_tmpfs(root, "1m")
    yield root
    subprocess.run(["umount", str(root)], check=True)


@pytest.fixture
def tight_models_root(source):
    """A tmpfs with room for the 1 GiB margin and the 2 MB model and 1 MiB more, not for a second copy of
    the model beside the first."""
    root = Path(source.path).parent
    mount_tmpfs(root, f"{1024 + 3}m")
    yield root
    subprocess.run(["umount", str(root)], check=True)


def test_a_target_without_room_is_refused_before_a_byte_is_copied(source, full_models_root, sshd_server, bob):
    from panel.catalog.copies import start_copy
    from panel.nodes.agents.ssh import host_key_fingerprint

    shown = host_key_fingerprint(sshd_server.host, sshd_server.port)
    target = target_node(sshd_server, "copy-full", fingerprint=shown)

    copy = wait_for(start_copy(source, target, bob, target_user=sshd_server.username))

    assert copy.status == "failed"
    assert copy.error.startswith(f"not enough disk space on copy-full at {full_models_root}: the copy needs ")
    assert f"0.00 GiB are free on {full_models_root}; nothing was copied" in copy.error
    assert "Free disk space on the target node" in copy.hint
    assert list(full_models_root.iterdir()) == []
    assert not any(e.payload["stage"].startswith("Copying") for e in copy.events.filter(kind="progress"))
    assert not target.artifacts.exists()


def test_a_retry_after_a_cut_off_copy_needs_room_only_for_what_is_missing(
    source, tight_models_root, sshd_server, celery_worker, bob
):
    from panel.catalog.copies import start_copy
    from panel.nodes.agents.ssh import host_key_fingerprint

    # What a copy cut off near its end left on the target: every file but the config, times kept (rsync -a).
    sent_from = celery_worker.sim_root / source.path.lstrip("/")
    shutil.copytree(sent_from, source.path, ignore=shutil.ignore_patterns("config.json"))
    assert shutil.disk_usage(tight_models_root).free < DISK_MARGIN_BYTES + sum(
        size for size, _ in files_of(sent_from).values()
    )  # so a check that ignores what is there would refuse the retry
    target = target_node(
        sshd_server, "copy-tight", fingerprint=host_key_fingerprint(sshd_server.host, sshd_server.port)
    )

    copy = wait_finished(start_copy(source, target, bob, target_user=sshd_server.username), timeout=120)

    assert copy.status == "succeeded", (copy.error, copy.hint)
    assert files_of(Path(source.path)) == files_of(sent_from)
    logged = [e.payload.get("line", "") for e in copy.events.filter(kind="log")]
    assert any(line.startswith("copy-tight: ") and "already there)" in line for line in logged), logged
