"""What an agent host downloads from the panel: the install script, the systemd unit and the agent package.

The package is an sdist built on the fly from this checkout's workers/ package, with the dependencies of
the project's pyproject.toml that the agent needs (no Django on Ascend hosts), so an agent always matches
the panel that serves it.
"""

import io
import re
import tarfile
import time
import tomllib
from functools import lru_cache

from django.conf import settings

DEPLOY_DIR = settings.BASE_DIR / "deploy"
INSTALL_SCRIPT = DEPLOY_DIR / "install-agent.sh"
UNIT_FILE = DEPLOY_DIR / "ascend-panel-agent.service"
AGENT_DISTRIBUTION = "ascend-panel-agent"
# Requirements of the project that the agent imports; the versions come from pyproject.toml.
AGENT_REQUIREMENTS = {
    "celery",
    "redis",
    "pydantic",
    "asyncssh",
    "psutil",
    "safetensors",
    "numpy",
    "cryptography",
    "pyyaml",
    "httpx",
    "prometheus-client",
    "huggingface-hub",
}
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _project() -> dict:
    return tomllib.loads((settings.BASE_DIR / "pyproject.toml").read_text())["project"]


def agent_requirements(project: dict) -> list[str]:
    return [
        requirement
        for requirement in project["dependencies"]
        if REQUIREMENT_NAME.match(requirement).group(0).lower() in AGENT_REQUIREMENTS
    ]


def agent_pyproject(project: dict) -> str:
    requirements = "".join(f'  "{r}",\n' for r in agent_requirements(project))
    return (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{AGENT_DISTRIBUTION}"\nversion = "{project["version"]}"\n'
        'description = "Ascend Panel agent: runs the panel\'s tasks on an Ascend host"\n'
        f'requires-python = "{project["requires-python"]}"\ndependencies = [\n{requirements}]\n\n'
        '[tool.setuptools.packages.find]\ninclude = ["workers*"]\n\n'
        '[tool.setuptools.package-data]\n"*" = ["*.yaml"]\n'
    )


def _add(archive: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    archive.addfile(info, io.BytesIO(data))


@lru_cache(maxsize=1)
def agent_sdist() -> bytes:
    """The agent's sdist (.tar.gz): workers/ plus a pyproject.toml naming only the agent's requirements."""
    project = _project()
    top = f"{AGENT_DISTRIBUTION.replace('-', '_')}-{project['version']}"
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        _add(archive, f"{top}/pyproject.toml", agent_pyproject(project).encode(), now)
        pkg_info = f"Metadata-Version: 2.1\nName: {AGENT_DISTRIBUTION}\nVersion: {project['version']}\n"
        _add(archive, f"{top}/PKG-INFO", pkg_info.encode(), now)
        workers_dir = settings.BASE_DIR / "workers"
        for path in sorted(workers_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml"):
                relative = path.relative_to(settings.BASE_DIR).as_posix()
                _add(archive, f"{top}/{relative}", path.read_bytes(), path.stat().st_mtime)
    return buffer.getvalue()
