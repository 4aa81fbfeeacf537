"""npu-smi failures: recognise them in the printed text and say what to do.

npu-smi prints its failures on stdout and often exits 0, so the exit code cannot be trusted; the
parsers call `raise_for_error` whenever they find nothing to parse, and a text with neither data
nor a known failure is an error too ("never an empty result").
"""

import re
from dataclasses import dataclass

from workers.i18n import gettext_noop as _


class NpuSmiError(Exception):
    """npu-smi failed. `message` is what npu-smi (or the parser) said; `hint` is the likely fix."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message, hint)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


@dataclass(frozen=True)
class Signature:
    pattern: re.Pattern
    hint: str  # may name the pattern's groups, e.g. {library}


# Order matters: the first match wins, so specific signatures come before the generic ones
# (a missing shared library also prints "No such file or directory").
SIGNATURES = (
    Signature(
        re.compile(r"ret is -8020\b|because the device is used", re.I),
        _(
            "The NPU is held by another container or host process; a device is not shared between "
            "containers. Stop the other container, or mount only free /dev/davinciN devices "
            "(on the host, /proc/uda/namespace_node shows which process holds each device)."
        ),
    ),
    Signature(
        re.compile(r"dcmi \w+ initiali[sz]ed? failed.*ret is -8005", re.I),
        _(
            "The driver could not open the NPUs. In a container, mount /dev/davinciN, "
            "/dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc and the driver directory; on the "
            "host, run as root (or a member of HwHiAiUser) and reboot if the driver or firmware was "
            "just upgraded."
        ),
    ),
    Signature(
        re.compile(r"dcmi \w+ initiali[sz]ed? failed.*ret is (?P<code>-?\d+)", re.I),
        _(
            "npu-smi could not talk to the NPU driver (DCMI error {code}). Check that the driver is "
            "loaded (lsmod | grep drv_davinci), that /dev/davinci* exist, and that npu-smi runs as root."
        ),
    ),
    Signature(
        re.compile(r"error while loading shared libraries: (?P<library>[^:\s]+)", re.I),
        _(
            "npu-smi cannot load {library}: LD_LIBRARY_PATH lacks the driver's libraries. Add "
            "/usr/local/Ascend/driver/lib64, lib64/common and lib64/driver to LD_LIBRARY_PATH, or "
            "mount /usr/local/Ascend/driver into the container."
        ),
    ),
    Signature(
        re.compile(r"No such file or directory|command not found|npu-smi: not found", re.I),
        _(
            "npu-smi is not installed or not on PATH. Install the Ascend driver, or mount "
            "/usr/local/Ascend/driver and /usr/local/sbin/npu-smi into the container."
        ),
    ),
    Signature(
        re.compile(r"Error parameter of (?P<option>-[ic])\b", re.I),
        _(
            "No NPU or chip has that id ({option}). Take NPU ids from `npu-smi info -l` (they can be "
            "sparse: 0, 32, 96 ...) and chip ids from `npu-smi info -m`."
        ),
    ),
    Signature(
        re.compile(r"Error parameter of (?P<option>\S+)", re.I),
        _(
            "This npu-smi version does not accept {option} with that value; `npu-smi info -h` lists "
            "what it supports (older drivers lack some -t types)."
        ),
    ),
    Signature(
        re.compile(r"This device does not support querying (?P<query>[^.\s]+)", re.I),
        _("This NPU does not report {query}; treat that field as unavailable."),
    ),
    Signature(
        re.compile(r"Permission denied|permission is denied|Operation not permitted", re.I),
        _("npu-smi needs root (or membership of the HwHiAiUser group) to read the NPUs."),
    ),
)


def find_error(text: str) -> NpuSmiError | None:
    """The NpuSmiError for the first known failure line in `text`, or None."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for signature in SIGNATURES:
        for line in lines:
            match = signature.pattern.search(line)
            if match:
                return NpuSmiError(line, signature.hint.format(**match.groupdict()))
    return None


def raise_for_error(text: str) -> None:
    """Raise NpuSmiError when `text` contains a known npu-smi failure; return otherwise."""
    error = find_error(text)
    if error is not None:
        raise error


def nothing_found(text: str, what: str) -> NpuSmiError:
    """The error for a text that holds neither `what` nor a known failure."""
    error = find_error(text)
    if error is not None:
        return error
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return NpuSmiError(
            _("npu-smi printed nothing"),
            _("Run npu-smi by hand on the host; if it prints nothing, reinstall the Ascend driver."),
        )
    first = " / ".join(lines[:3])
    return NpuSmiError(
        _("no {what} found in the npu-smi output (it begins: {first})").format(what=what, first=first),
        _("Run the same npu-smi command by hand; the output is not in a format this agent knows."),
    )
