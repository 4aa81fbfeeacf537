"""Access to the real Ascend outputs in ../shared/ascend-samples (next to the repository).

The folder is not part of the repository and its files must never be copied into it: tests read it
where it exists and skip where it does not.
"""

from pathlib import Path

import pytest

SAMPLES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "ascend-samples"


def samples_dir() -> Path | None:
    """The samples folder, or None when this checkout has none."""
    return SAMPLES_DIR if SAMPLES_DIR.is_dir() else None


def read_sample(name: str) -> str:
    """The text of one sample; skips the calling test when the folder or the file is absent."""
    folder = samples_dir()
    if folder is None:
        pytest.skip(f"no Ascend samples folder at {SAMPLES_DIR}")
    path = folder / name
    if not path.is_file():
        pytest.skip(f"sample {name} is not in {folder}")
    return path.read_text(encoding="utf-8")


def sample_names(pattern: str) -> list[str]:
    """Names of the samples matching a glob, sorted; empty when the folder is absent."""
    folder = samples_dir()
    return sorted(path.name for path in folder.glob(pattern)) if folder else []
