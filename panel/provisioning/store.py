"""The package store: .run packages and wheels uploaded once, kept under PANEL_DATA_DIR/packages/<sha256>/,
handed to nodes with their checksum."""

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from panel.provisioning import conf
from panel.provisioning.models import PackageFile, PackageKind

# Huawei's file names (workers.steps.packages.package_filename writes the same ones).
RUN_PATTERNS = (
    (
        PackageKind.DRIVER,
        re.compile(r"^(?:Ascend-hdk-\w+|Atlas-A3-hdk)-npu-driver_(?P<v>[^_]+)_linux-\w+\.run$"),
    ),
    (PackageKind.FIRMWARE, re.compile(r"^(?:Ascend-hdk-\w+|Atlas-A3-hdk)-npu-firmware_(?P<v>[^_]+)\.run$")),
    (PackageKind.TOOLKIT, re.compile(r"^Ascend-cann-toolkit_(?P<v>[^_]+)_linux-\w+\.run$")),
    (
        PackageKind.OPS,
        re.compile(
            r"^(?:Ascend-cann-kernels-\w+|Atlas-A3-cann-kernels|Ascend-cann-\w+-ops)_(?P<v>[^_]+)_linux-\w+\.run$"
        ),
    ),
    (PackageKind.NNAL, re.compile(r"^Ascend-cann-nnal_(?P<v>[^_]+)_linux-\w+\.run$")),
)
# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
WHEEL_PATTERN = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<v>[A-Za-z0-9_.!+]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$"
)
CHUNK = 1024 * 1024


def classify(name: str) -> tuple[str, str]:
    """(kind, version) from a package's file name; ValidationError naming the expected forms otherwise."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise ValidationError({"file": [_("Give a plain file name, not a path.")]})
    for kind, pattern in RUN_PATTERNS:
        match = pattern.match(name)
        if match:
            return kind, match.group("v")
    match = WHEEL_PATTERN.match(name)
    if match:
        return PackageKind.WHEEL, match.group("v")
    raise ValidationError(
        {
            "file": [
                _(
                    "%(name)s is neither a Huawei .run package nor a wheel. Keep the name Huawei gives it "
                    "(e.g. Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run) or a wheel's name "
                    "(name-version-python-abi-platform.whl)."
                )
                % {"name": name}
            ]
        }
    )


def stored_path(package: PackageFile) -> Path:
    return conf.packages_dir() / package.sha256 / package.name


def _write_atomically(chunks, name: str) -> tuple[str, int, Path]:
    """Stream the upload to a temporary file in the store, then rename it into place by its checksum."""
    root = conf.packages_dir()
    root.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    # delete=False: the file outlives the handle, renamed into place (or removed below on failure).
    handle = tempfile.NamedTemporaryFile(dir=root, prefix=".upload-", delete=False)  # noqa: SIM115
    try:
        with handle:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        sha256 = digest.hexdigest()
        target = root / sha256 / name
        target.parent.mkdir(exist_ok=True)
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return sha256, size, target


def _remove_file(sha256: str, name: str) -> None:
    """Delete a stored file unless another row still points at the same bytes under that name."""
    if PackageFile.objects.filter(sha256=sha256, name=name).exists():
        return
    shutil.rmtree(conf.packages_dir() / sha256, ignore_errors=True)


def add_package(uploaded, user=None) -> PackageFile:
    """Store an uploaded file (a Django UploadedFile); a file of the same name is replaced."""
    kind, version = classify(uploaded.name)
    sha256, size, _path = _write_atomically(uploaded.chunks(CHUNK), uploaded.name)
    with transaction.atomic():
        previous = PackageFile.objects.select_for_update().filter(name=uploaded.name).first()
        package, _created = PackageFile.objects.update_or_create(
            name=uploaded.name,
            defaults={"kind": kind, "version": version, "sha256": sha256, "size": size, "uploaded_by": user},
        )
        if previous is not None and previous.sha256 != sha256:
            transaction.on_commit(lambda: _remove_file(previous.sha256, previous.name))
    return package


def add_local_file(path: Path, user=None) -> PackageFile:
    """Store a file from this machine's disk (the sim seeding command)."""

    class _Local:
        name = path.name

        @staticmethod
        def chunks(size):
            with path.open("rb") as handle:
                while chunk := handle.read(size):
                    yield chunk

    return add_package(_Local, user)


def delete_package(package: PackageFile) -> None:
    sha256, name = package.sha256, package.name
    with transaction.atomic():
        package.delete()
        transaction.on_commit(lambda: _remove_file(sha256, name))
