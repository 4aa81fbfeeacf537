"""What an agent host downloads from the panel: the install script, the systemd unit and the agent package.

The package is an sdist built on the fly from this checkout's workers/ package, with the dependencies of
the project's pyproject.toml that the agent needs (no Django on Ascend hosts), so an agent always matches
the panel that serves it.
"""

import gzip
import hashlib
import io
import re
import tarfile
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
    "orjson",
    "pyyaml",
    "httpx",
    "prometheus-client",
    "huggingface-hub",
}
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")
SOURCE_DATE = 1_700_000_000  # the fixed mtime of every file in the package (reproducible bytes)


def _project() -> dict:
    return tomllib.loads((settings.BASE_DIR / "pyproject.toml").read_text())["project"]


def agent_requirements(project: dict) -> list[str]:
    return [
        requirement
        for requirement in project["dependencies"]
        if (name := REQUIREMENT_NAME.match(requirement)) is not None
        and name.group(0).lower() in AGENT_REQUIREMENTS
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
    """The agent's sdist (.tar.gz): workers/ plus a pyproject.toml naming only the agent's requirements.

    Byte for byte the same for the same sources (fixed times in the tar and gzip headers), so the sha256
    pinned in a join command still matches after the panel restarts."""
    project = _project()
    top = f"{AGENT_DISTRIBUTION.replace('-', '_')}-{project['version']}"
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        _add(archive, f"{top}/pyproject.toml", agent_pyproject(project).encode(), SOURCE_DATE)
        pkg_info = f"Metadata-Version: 2.1\nName: {AGENT_DISTRIBUTION}\nVersion: {project['version']}\n"
        _add(archive, f"{top}/PKG-INFO", pkg_info.encode(), SOURCE_DATE)
        workers_dir = settings.BASE_DIR / "workers"
        for path in sorted(workers_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml"):
                relative = path.relative_to(settings.BASE_DIR).as_posix()
                _add(archive, f"{top}/{relative}", path.read_bytes(), SOURCE_DATE)
    return buffer.getvalue()


@lru_cache(maxsize=1)
def agent_sdist_sha256() -> str:
    return hashlib.sha256(agent_sdist()).hexdigest()


def install_script_sha256() -> str:
    return hashlib.sha256(INSTALL_SCRIPT.read_bytes()).hexdigest()
