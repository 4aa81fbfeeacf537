"""What the weight rewriters (quantize, convert) share: checking a source folder, staging the output
in DST.tmp with an atomic rename, and carrying over the files that are not weights."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workers.models.node_paths import staging_dir
from workers.models.safetensors_io import SafetensorsFormatError, TensorInfo, read_header, weight_files

# Files a rewrite produces itself, so they are never copied over from the source.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf")
INDEX_SUFFIX = ".index.json"
QUANT_DESCRIPTION = "quant_model_description.json"


class BadSourceError(ValueError):
    """The source folder cannot be rewritten; the message says why and what to do."""


def load_source(source: str | Path) -> tuple[Path, dict[str, Any], list[tuple[Path, list[TensorInfo]]]]:
    """The source folder, its config and the tensors of each safetensors shard, checked for completeness."""
    folder = Path(source)
    if not folder.is_dir():
        raise BadSourceError(f"source {folder} is not a folder")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise BadSourceError(f"source {folder} holds no config.json; give the folder of a Hugging Face model")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadSourceError(f"{config_path} is not valid JSON ({error})") from error
    files = weight_files(folder)
    if not files:
        raise BadSourceError(
            f"source {folder} holds no *.safetensors weights; download them (or convert .bin weights) first"
        )
    _check_index_complete(folder)
    shards = []
    for file in files:
        try:
            shards.append((file, read_header(file)[0]))
        except (OSError, SafetensorsFormatError) as error:
            raise BadSourceError(f"cannot read {file.name}: {error}; re-download it") from error
    return folder, config, shards


def _check_index_complete(folder: Path) -> None:
    for index_path in folder.glob(f"*.safetensors{INDEX_SUFFIX}"):
        try:
            weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError) as error:
            raise BadSourceError(f"{index_path.name} is not a valid index ({error})") from error
        missing = sorted({name for name in weight_map.values() if not (folder / name).is_file()})
        if missing:
            raise BadSourceError(
                f"{index_path.name} lists shards that are not there: {', '.join(missing[:3])}; "
                "finish the download first"
            )


@contextlib.contextmanager
def staged_output(destination: str | Path) -> Iterator[Path]:
    """Yield DST.tmp to write into; rename it to DST only when the block finishes without error.

    A crash or error leaves no half-written DST, and a leftover DST.tmp from an earlier crash is cleared.
    """
    final = Path(destination)
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise BadSourceError(f"destination {final} exists and is not empty; remove it or pick another")
    staging = staging_dir(final)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if final.exists():
        final.rmdir()  # empty, checked above
    staging.rename(final)


def copy_side_files(source: Path, destination: Path) -> list[str]:
    """Copy tokenizer, generation config, chat template, remote code… everything but weights and config."""
    copied = []
    for path in sorted(source.iterdir()):
        name = path.name
        if not path.is_file() or name.startswith(".") or name in ("config.json", QUANT_DESCRIPTION):
            continue
        if name.endswith(WEIGHT_SUFFIXES) or name.endswith(INDEX_SUFFIX):
            continue
        shutil.copy2(path, destination / name)
        copied.append(name)
    return copied


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
