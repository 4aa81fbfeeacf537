"""The mid-copy scenario's set-up: a loopback sshd as the copy's target node (tests/sshd.py), a ready model
copy on the source node large enough that rsync is still at work when its agent is killed, and the copy
started by the panel's own service (the copy has no REST endpoint yet; the HTML form calls the same)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

from panel.run import BASE_DIR, PYTHON
from tests.faults.stack import FaultStack, StackError

COPY_MB = 300
START_COPY = """
import json, os
from django.contrib.auth import get_user_model
from panel.catalog.models import Model, ModelArtifact
from panel.catalog.copies import start_copy
from panel.nodes.models import Node
from panel.nodes.agents.ssh import host_key_fingerprint
spec = json.loads(os.environ["FAULTS_SPEC"])
model, _ = Model.objects.get_or_create(name="tiny-copy-faults", defaults={"source": "path"})
source = ModelArtifact.objects.create(
    model=model, node=Node.objects.get(name=spec["node"]), path=spec["path"], ready=True
)
target, _ = Node.objects.get_or_create(
    name=spec["node"] + "-target",
    defaults={
        "transport": "agent",
        "address": "127.0.0.1",
        "ssh_port": spec["port"],
        "ssh_host_key_fingerprint": host_key_fingerprint("127.0.0.1", spec["port"]),
    },
)
user = get_user_model().objects.get(username="faults")
print(json.dumps({"operation": str(start_copy(source, target, user, target_user=spec["user"]).id)}))
"""


@contextlib.contextmanager
def copy_target(stack: FaultStack):
    """A loopback sshd for the copy's target; yields the tests.sshd.SshdServer."""
    import tempfile

    from tests import sshd

    server = sshd._prepare(Path(tempfile.mkdtemp(prefix="sshd-", dir=stack.dir)))
    process = sshd._launch(server)
    try:
        yield server
    finally:
        sshd._end(process)


def copy_path(stack: FaultStack, node: str) -> str:
    """The model's path on both nodes: under the source's sim root, and as is on the loopback target."""
    return f"{stack.env['PANEL_MODELS_ROOT']}/copy-{node}"


def folder_bytes(folder: Path) -> int:
    """Bytes under `folder`, rsync's hidden temporary files (the file being written) included."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def model_bytes(stack: FaultStack, node: str) -> int:
    return folder_bytes(stack.sim_roots[node] / copy_path(stack, node).lstrip("/"))


def copied_bytes(stack: FaultStack, node: str) -> int:
    """What rsync has written on the target so far: the copy's own progress, read where it happens."""
    return folder_bytes(Path(copy_path(stack, node)))


def start_copy(stack: FaultStack, node: str, server) -> str:
    """Write the model under the source's sim root and start its copy to the sshd node; the operation id."""
    from workers.models.tiny import make_tiny_model

    path = copy_path(stack, node)
    make_tiny_model(stack.sim_roots[node] / path.lstrip("/"), arch="qwen2", target_mb=COPY_MB)
    spec = {"node": node, "path": path, "port": server.port, "user": server.username}
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", START_COPY],
        cwd=BASE_DIR,
        env={**stack.env, "FAULTS_SPEC": json.dumps(spec)},
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise StackError(f"could not start the copy: {out.stderr[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["operation"]
