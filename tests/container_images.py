"""Engine images for the container tests, built here without a registry: a small root filesystem (bash,
a python3 link, the image's CANN set_env scripts) imported with `podman import`; the host's libraries,
the interpreter's installation and the engine's code are bind-mounted read-only by the agent
(ASCEND_PANEL_CONTAINER_MOUNTS), as a site would hand its own tools to containers.

    sim engine:  python3 + this repository (workers.sim's vllm shim first on PYTHONPATH)
    vllm-cpu:    python3 = the engine venv's python (REPO/.venv-engine, mounted at the same path)
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PODMAN = shutil.which("podman")
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
SIM_IMAGE = "localhost/ascend-panel-test/sim-engine:v1"
CPU_IMAGE = "localhost/ascend-panel-test/vllm-cpu:v1"
TOOLS = ("lscpu",)
SET_ENV = {
    # What the vllm-ascend image's scripts set that the engines here read (nothing needs more).
    "usr/local/Ascend/ascend-toolkit/set_env.sh": (
        "export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest\n"
        "export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}\n"
    ),
    "usr/local/Ascend/nnal/atb/set_env.sh": "export ATB_HOME_PATH=/usr/local/Ascend/nnal/atb/latest\n",
}


def podman_ready() -> str:
    """ "" when rootful podman runs containers here, else why not (the reason a test skips)."""
    if PODMAN is None:
        return "podman is not installed (apt-get install podman runc; .ci/run does it)"
    if os.geteuid() != 0:
        return "the container tests need rootful podman (run as root)"
    if not CONTAINERS_CONF.exists() or "default_ulimits" not in CONTAINERS_CONF.read_text():
        return f"{CONTAINERS_CONF} is not set up for this VM (.ci/run writes it)"
    return ""


def multiarch_lib() -> str:
    return f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}"


def python_mounts() -> list[str]:
    """The interpreter's installation (binary, libpython, standard library), mounted at the same paths:
    its whole prefix (pyenv, /opt/python), or for a system interpreter under /usr only its binary and
    standard library, so the image's own /usr (bash, the set_env scripts) stays visible."""
    if sys.base_prefix.rstrip("/") in ("", "/usr"):
        return [f"{base_python().resolve()}:ro", f"{sysconfig.get_paths()['stdlib']}:ro"]
    return [f"{sys.base_prefix}:ro"]


def base_python() -> Path:
    return Path(getattr(sys, "_base_executable", sys.executable))


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def rootfs_tarball(path: Path) -> Path:
    """bash, python3 (a link into the mounted interpreter) and the set_env scripts."""
    folders = {"usr", "usr/bin", "usr/lib", "usr/lib64", "etc", "root", "dev", "proc", "sys", "run"}
    for name in SET_ENV:
        parts = Path(name).parts
        folders.update(str(Path(*parts[:depth])) for depth in range(1, len(parts)))
    with tarfile.open(path, "w") as tar:
        for folder in sorted(folders):
            _add_dir(tar, folder)
        _add_dir(tar, "tmp", 0o1777)
        for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
            _add_link(tar, link, target)
        _add_file(tar, "usr/bin/bash", Path("/usr/bin/bash").read_bytes(), 0o755)
        for tool in TOOLS:  # what vLLM's CPU backend runs (lscpu --json, to place its threads)
            if Path(f"/usr/bin/{tool}").exists():
                _add_file(tar, f"usr/bin/{tool}", Path(f"/usr/bin/{tool}").read_bytes(), 0o755)
        _add_link(tar, "usr/bin/sh", "bash")
        _add_link(tar, "usr/bin/python3", str(base_python()))
        loaders = {*Path("/usr/lib64").glob("ld-linux*.so*"), *Path("/usr/lib").glob("ld-linux*.so*")}
        for loader in sorted(loaders):
            # The dynamic loader's well-known path, pointing into the mounted multiarch folder.
            _add_link(
                tar, str(loader).lstrip("/"), os.readlink(loader) if loader.is_symlink() else str(loader)
            )
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n")
        _add_file(tar, "etc/group", b"root:x:0:\n")
        for name, text in SET_ENV.items():
            _add_file(tar, name, text.encode())
    return path


def build_image(reference: str, changes: list[str], workdir: Path) -> str:
    tarball = rootfs_tarball(workdir / "rootfs.tar")
    earlier = subprocess.run(
        [PODMAN, "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    argv = [PODMAN, "import"]
    for change in changes:
        argv += ["--change", change]
    subprocess.run([*argv, str(tarball), reference], check=True, capture_output=True, timeout=300)
    if earlier:  # the last session's build, now untagged: not left behind as a dangling image
        subprocess.run([PODMAN, "rmi", earlier], check=False, capture_output=True, timeout=120)
    return reference


def sim_engine_image(workdir: Path) -> str:
    path = f"{REPO / 'workers/sim/vllm_shim'}:{REPO}"
    changes = [f"ENV PYTHONPATH={path}", "ENV PATH=/usr/bin", 'CMD ["/usr/bin/bash"]']
    return build_image(SIM_IMAGE, changes, workdir)


def cpu_engine_image(workdir: Path, venv: Path) -> str:
    changes = [f"ENV PATH={venv.resolve()}/bin:/usr/bin", 'CMD ["/usr/bin/bash"]']
    return build_image(CPU_IMAGE, changes, workdir)


def save(reference: str, archive: Path) -> Path:
    subprocess.run(
        [PODMAN, "save", "-o", str(archive), reference], check=True, capture_output=True, timeout=300
    )
    return archive


def remove_image(reference: str) -> None:
    subprocess.run([PODMAN, "rmi", "-f", reference], check=False, capture_output=True, timeout=120)


def sim_mounts(sim_root: Path) -> str:
    """ASCEND_PANEL_CONTAINER_MOUNTS for the sim engine image on a sim host."""
    return ",".join([f"{multiarch_lib()}:ro", *python_mounts(), f"{REPO}:ro", f"{sim_root.resolve()}:rw"])


def cpu_mounts(venv: Path) -> str:
    venv = venv.resolve()
    return ",".join([f"{multiarch_lib()}:ro", *python_mounts(), f"{venv}:ro"])


def remove_labelled_containers(node: str) -> None:
    """Whatever a failing test left running must not answer the next test's port."""
    listed = subprocess.run(
        [PODMAN, "ps", "-a", "-q", "--filter", f"label=ascend-panel.node={node}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    for container in listed.stdout.split():
        subprocess.run(
            [PODMAN, "rm", "-f", "-t", "0", container], check=False, capture_output=True, timeout=60
        )


REGISTRY = shutil.which("docker-registry")
REGISTRY_ADDRESS = "127.0.0.1:5055"  # registries.conf.d marks it insecure (plain HTTP); .ci/run writes it
REGISTRIES_CONF = Path("/etc/containers/registries.conf.d/50-ascend-panel-test.conf")


def registry_ready() -> str:
    """ "" when a local registry can serve the pull test, else why not."""
    if REGISTRY is None:
        return "docker-registry is not installed (apt-get install docker-registry; .ci/run does it)"
    if not REGISTRIES_CONF.exists() or REGISTRY_ADDRESS not in REGISTRIES_CONF.read_text():
        return f"{REGISTRIES_CONF} does not mark {REGISTRY_ADDRESS} insecure (.ci/run writes it)"
    return ""


@contextlib.contextmanager
def local_registry(workdir: Path):
    """A real image registry (the distribution registry, Debian's docker-registry) on REGISTRY_ADDRESS."""
    config = workdir / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {workdir / 'data'}\n"
        f"http:\n  addr: {REGISTRY_ADDRESS}\n"
    )
    server = subprocess.Popen(
        [REGISTRY, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        host, port = REGISTRY_ADDRESS.split(":")
        deadline = time.monotonic() + 20
        while socket.socket().connect_ex((host, int(port))) != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"docker-registry did not listen on {REGISTRY_ADDRESS}")
            time.sleep(0.1)
        yield REGISTRY_ADDRESS
    finally:
        server.terminate()
        server.wait(10)


def push(reference: str, target: str) -> None:
    subprocess.run(
        [PODMAN, "push", "--tls-verify=false", reference, target],
        check=True,
        capture_output=True,
        timeout=300,
    )
