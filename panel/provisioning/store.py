"""The package store: .run packages and wheels uploaded once, kept under PANEL_DATA_DIR/packages/<sha256>/,
handed to nodes with their checksum.

Nodes install these files as root, so what they get is guarded:
- an upload of a kind whose vendor publishes checksums (Huawei's .run packages, wheels) must carry that
  SHA-256 (`vendor_sha256`), and bytes that do not match it are refused;
- an operator's upload of a new name waits for an admin's approval (sha256 empty, pending_sha256 set:
  nothing installs it) and only an admin replaces an existing one;
- a replacement waits (pending_sha256) until an admin confirms its checksum; until then nodes keep getting
  the confirmed file. Approval and confirmation are the same step (confirm_replacement).
Files the panel stores itself (the sim's seeding, `user=None`) are in use at once. Every change is
audited."""

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.accounts.roles import ADMIN, has_role
from panel.audit import actions as audit
from panel.audit.services import record
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
# `docker save` / `podman save` / `isula save` archives: name[_version].tar (or .tar.gz), for air-gapped
# nodes that load their engine images instead of pulling them.
IMAGE_ARCHIVE_PATTERN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9.-]*?)(?:_(?P<v>[A-Za-z0-9][A-Za-z0-9._-]*?))?\.(?:tar|tar\.gz|tgz)$"
)
CHUNK = 1024 * 1024
# Kinds whose vendor publishes a SHA-256 per file (Huawei's download pages, a pip index): an upload must
# carry it. Image archives are made locally (docker save): there is no vendor's checksum to ask for.
VENDOR_CHECKSUM_KINDS = frozenset(PackageKind.values) - {PackageKind.IMAGE}
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


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
    match = IMAGE_ARCHIVE_PATTERN.match(name)
    if match:
        return PackageKind.IMAGE, match.group("v") or "-"
    raise ValidationError(
        {
            "file": [
                _(
                    "%(name)s is neither a Huawei .run package, a wheel nor a container image archive. "
                    "Keep the name Huawei gives it (e.g. Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run), a "
                    "wheel's name (name-version-python-abi-platform.whl), or name an image archive "
                    "name_version.tar (e.g. vllm-ascend_v0.11.0.tar, from docker save)."
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
    """Delete a stored file unless a row still points at those bytes under that name (in use or pending)."""
    if (
        not sha256
        or PackageFile.objects.filter(Q(sha256=sha256) | Q(pending_sha256=sha256), name=name).exists()
    ):
        return
    shutil.rmtree(conf.packages_dir() / sha256, ignore_errors=True)


def _remove_later(sha256: str, name: str) -> None:
    transaction.on_commit(lambda: _remove_file(sha256, name))


def _refuse_replacing(name: str, user) -> None:
    if not has_role(user, ADMIN):
        raise PermissionDenied(
            _(
                "%(name)s is already in the store. Only an admin may replace a package that nodes install "
                "as root."
            )
            % {"name": name}
        )


def _trusted(user) -> bool:
    """The panel itself (user None: a management command on its host) or an admin."""
    return user is None or has_role(user, ADMIN)


def _vendor_sha256(kind: str, name: str, given: str, user) -> str:
    """The vendor's SHA-256 the uploader gave, normalised; required for kinds that have one (except for
    the panel's own files)."""
    given = (given or "").strip().lower()
    if given and not SHA256_PATTERN.match(given):
        raise ValidationError({"vendor_sha256": [_("Give the SHA-256 as 64 hexadecimal digits.")]})
    if not given and user is not None and kind in VENDOR_CHECKSUM_KINDS:
        raise ValidationError(
            {
                "vendor_sha256": [
                    _(
                        "Give the SHA-256 its vendor publishes for %(name)s (Huawei's download page lists "
                        "one per file; a pip index gives a wheel's): nodes install it as root."
                    )
                    % {"name": name}
                ]
            }
        )
    return given


def add_package(uploaded, user=None, vendor_sha256: str = "") -> PackageFile:
    """Store an uploaded file (a Django UploadedFile) whose bytes match `vendor_sha256` when given. A new
    name is in use at once when an admin (or the panel) uploads it, and waits for an admin's approval when
    an operator does; a new file under an existing name (admins only) becomes that package's pending
    replacement until confirm_replacement."""
    kind, version = classify(uploaded.name)
    if PackageFile.objects.filter(name=uploaded.name).exists():
        _refuse_replacing(uploaded.name, user)  # before writing a byte
    expected = _vendor_sha256(kind, uploaded.name, vendor_sha256, user)
    sha256, size, _path = _write_atomically(uploaded.chunks(CHUNK), uploaded.name)
    try:
        if expected and sha256 != expected:
            raise ValidationError(
                {
                    "vendor_sha256": [
                        _(
                            "The uploaded %(name)s has SHA-256 %(actual)s, not the vendor's %(expected)s: "
                            "the file is damaged or not the vendor's. Download it again."
                        )
                        % {"name": uploaded.name, "actual": sha256, "expected": expected}
                    ]
                }
            )
        with transaction.atomic():
            return _add_row(uploaded.name, kind, version, sha256, size, user)
    except BaseException:
        _remove_file(sha256, uploaded.name)
        raise


def _add_row(name: str, kind: str, version: str, sha256: str, size: int, user) -> PackageFile:
    package = PackageFile.objects.select_for_update().filter(name=name).first()
    if package is None and _trusted(user):
        package = PackageFile.objects.create(
            name=name, kind=kind, version=version, sha256=sha256, size=size, uploaded_by=user
        )
        record(user, audit.PACKAGE_ADDED, name, sha256=sha256, size=size)
        return package
    if package is None:  # an operator's new name: stored, installed nowhere until an admin approves it
        package = PackageFile.objects.create(
            name=name,
            kind=kind,
            version=version,
            sha256="",
            size=0,
            pending_sha256=sha256,
            pending_size=size,
            pending_uploaded_by=user,
            pending_at=timezone.now(),
        )
        record(user, audit.PACKAGE_ADDED, name, pending_sha256=sha256, size=size, awaiting_approval=True)
        return package
    _refuse_replacing(name, user)  # again under the lock: the name may have appeared since the check
    if sha256 in (package.sha256, package.pending_sha256):
        return package  # the same bytes again: nothing changes
    earlier_pending = package.pending_sha256
    package.pending_sha256, package.pending_size = sha256, size
    package.pending_uploaded_by, package.pending_at = user, timezone.now()
    package.save(
        update_fields=["pending_sha256", "pending_size", "pending_uploaded_by", "pending_at", "updated"]
    )
    _remove_later(earlier_pending, name)
    record(
        user, audit.PACKAGE_REPLACEMENT_PENDING, name, sha256=package.sha256, pending_sha256=sha256, size=size
    )
    return package


def _locked_pending(package: PackageFile) -> PackageFile:
    package = PackageFile.objects.select_for_update().get(pk=package.pk)
    if not package.pending_sha256:
        raise ValidationError(
            {"sha256": [_("%(name)s has no pending replacement.") % {"name": package.name}]}
        )
    return package


def _clear_pending(package: PackageFile) -> None:
    package.pending_sha256, package.pending_size, package.pending_uploaded_by, package.pending_at = (
        "",
        None,
        None,
        None,
    )
    package.save()


def confirm_replacement(package: PackageFile, sha256: str, user) -> PackageFile:
    """Put the pending file in use: approve an operator's new package, or confirm a replacement. `sha256`
    is the checksum the admin checked against the vendor's: it must be the pending one (a newer upload
    since the page was shown is not confirmed by mistake)."""
    _refuse_replacing(package.name, user)
    with transaction.atomic():
        package = _locked_pending(package)
        if sha256.strip().lower() != package.pending_sha256:
            raise ValidationError(
                {
                    "sha256": [
                        _("The pending replacement of %(name)s has SHA-256 %(pending)s, not %(given)s.")
                        % {"name": package.name, "pending": package.pending_sha256, "given": sha256}
                    ]
                }
            )
        previous = package.sha256
        assert package.pending_size is not None, "a pending file has its size (upload_pending sets both)"
        package.sha256, package.size = package.pending_sha256, package.pending_size
        package.uploaded_by = package.pending_uploaded_by
        _clear_pending(package)
        _remove_later(previous, package.name)
        action = audit.PACKAGE_REPLACEMENT_CONFIRMED if previous else audit.PACKAGE_APPROVED
        record(user, action, package.name, sha256=package.sha256, previous=previous)
    return package


def discard_replacement(package: PackageFile, user) -> PackageFile:
    """Drop the pending file; the confirmed one stays in use (a package never approved goes altogether)."""
    _refuse_replacing(package.name, user)
    with transaction.atomic():
        package = _locked_pending(package)
        discarded = package.pending_sha256
        if package.sha256:
            _clear_pending(package)
        else:
            package.delete()
        _remove_later(discarded, package.name)
        record(
            user,
            audit.PACKAGE_REPLACEMENT_DISCARDED,
            package.name,
            sha256=package.sha256,
            discarded=discarded,
        )
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


def delete_package(package: PackageFile, user=None) -> None:
    sha256, pending, name = package.sha256, package.pending_sha256, package.name
    with transaction.atomic():
        package.delete()
        _remove_later(sha256, name)
        _remove_later(pending, name)
        record(user, audit.PACKAGE_DELETED, name, sha256=sha256, pending_sha256=pending)
