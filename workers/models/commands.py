"""argv builders for the external model tools: ATC (ONNX → .om), msModelSlim (quantization), rsync and the
df that asks a copy target for free disk first.

Each checks its inputs and refuses anything that could be read as an option or is not what the tool takes,
so nothing a user typed changes the command's meaning. Nothing here runs a command.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from workers.i18n import gettext_noop as _
from workers.models.node_paths import normalise

ATC_FRAMEWORK_ONNX = "5"
ATC_INPUT_FORMATS = ("NCHW", "NHWC", "ND", "NCDHW", "NDHWC")
# name:d,d,d[;name:d,d] — dims are positive, or -1 for a dynamic dimension.
INPUT_SHAPE = re.compile(
    r"[A-Za-z0-9_.:/-]+?:(-1|\d+)(,(-1|\d+))*(;[A-Za-z0-9_.:/-]+?:(-1|\d+)(,(-1|\d+))*)*\Z"
)
# Ascend910B3, Ascend310P3, and the Atlas A3 family's Ascend910_9382 form.
SOC_VERSION = re.compile(r"Ascend[0-9A-Za-z]+(_[0-9]{4})?\Z")
# Chip names npu-smi prints that do not tell the SoC apart: an Atlas A3 chip says only Ascend910 (its SoC is
# e.g. Ascend910_9382), an Atlas 800 9010 may say 910.
AMBIGUOUS_CHIP_NAMES = frozenset({"910", "Ascend910"})
MSMODELSLIM_QUANT_TYPES = ("w8a8", "w8a16", "w4a16", "w8a8s")
MSMODELSLIM_DEVICES = ("npu", "cpu")
# msModelSlim's --model_type names the model adapter and best-practice recipe, e.g. Qwen2.5-7B-Instruct.
MSMODELSLIM_MODEL_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
SSH_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
SSH_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}\Z|\[?[0-9A-Fa-f:]+\]?\Z")
SSH_OPTION_PATH = re.compile(r"/[^\s'\"\\]*\Z")
# The name a pinned known_hosts file lists the target's key under (ssh's HostKeyAlias), so the entry does
# not depend on how the address and port are spelled.
PINNED_HOST_ALIAS = "copy-target"


class CommandInputError(ValueError):
    """An input a tool cannot take; the message names the field and the accepted form."""


def soc_version_for(npu_name: str) -> str:
    """ATC's --soc_version from npu-smi's chip name: 910B3 → Ascend910B3, 310P3 → Ascend310P3."""
    name = (npu_name or "").strip()
    if name in AMBIGUOUS_CHIP_NAMES:
        raise CommandInputError(
            f"npu-smi calls this chip {name!r}, which does not tell its SoC version (an Atlas A3 chip is "
            "e.g. Ascend910_9382, an Atlas 800 9010 chip Ascend910A); enter the SoC version"
        )
    soc = name if name.startswith("Ascend") else f"Ascend{name}"
    if not name or not SOC_VERSION.match(soc):
        raise CommandInputError(
            f"cannot tell the SoC version from the NPU name {npu_name!r}; run an inventory"
        )
    return soc


def atc_argv(
    onnx_path: str, output_prefix: str, soc_version: str, input_shape: str = "", input_format: str = "NCHW"
) -> list[str]:
    """`atc` converting ONNX model onnx_path into output_prefix.om for the SoC soc_version."""
    if not SOC_VERSION.match(soc_version):
        raise CommandInputError(
            f"soc_version must look like Ascend910B3, Ascend310P3 or Ascend910_9382, not {soc_version!r}"
        )
    if input_format not in ATC_INPUT_FORMATS:
        raise CommandInputError(f"input_format must be one of {', '.join(ATC_INPUT_FORMATS)}")
    if input_shape and not INPUT_SHAPE.match(input_shape):
        raise CommandInputError(
            f"input_shape must be name:dims like images:1,3,640,640 (several joined by ;), "
            f"not {input_shape!r}"
        )
    if not onnx_path.endswith(".onnx"):
        raise CommandInputError(f"{onnx_path} is not an .onnx file")
    argv = [
        "atc",
        f"--model={normalise(onnx_path)}",
        f"--framework={ATC_FRAMEWORK_ONNX}",
        f"--output={normalise(output_prefix)}",
        f"--soc_version={soc_version}",
        f"--input_format={input_format}",
    ]
    if input_shape:
        argv.append(f"--input_shape={input_shape}")
    return [*argv, "--log=error"]


def msmodelslim_model_type(repo_id: str, name: str) -> str:
    """msModelSlim's --model_type for a model: its repository's name (Qwen/Qwen2.5-7B-Instruct →
    Qwen2.5-7B-Instruct), which is how msModelSlim names its recipes, else the catalog name."""
    return (repo_id or "").rstrip("/").rsplit("/", 1)[-1] or name


def msmodelslim_argv(
    model_path: str, save_path: str, quant_type: str = "w8a8", device: str = "npu", model_type: str = ""
) -> list[str]:
    """msModelSlim's one-line quantization (`msmodelslim quant ...`); --model_type is required there."""
    if not MSMODELSLIM_MODEL_TYPE.match(model_type or ""):
        raise CommandInputError(
            f"model_type must be msModelSlim's model name, like Qwen2.5-7B-Instruct, not {model_type!r}"
        )
    if quant_type not in MSMODELSLIM_QUANT_TYPES:
        raise CommandInputError(f"quant_type must be one of {', '.join(MSMODELSLIM_QUANT_TYPES)}")
    if device not in MSMODELSLIM_DEVICES:
        raise CommandInputError("device must be npu or cpu")
    return [
        "msmodelslim",
        "quant",
        "--model_type",
        model_type,
        "--model_path",
        normalise(model_path),
        "--save_path",
        normalise(save_path),
        "--device",
        device,
        "--quant_type",
        quant_type,
    ]


def rsync_argv(
    source_path: str,
    user: str,
    host: str,
    target_path: str,
    ssh_port: int = 22,
    *,
    known_hosts_file: str = "",
    identity_file: str = "",
    bwlimit_kib_s: int = 0,
) -> list[str]:
    """rsync pushing folder source_path to host:target_path over SSH, keeping partial files on a drop.

    known_hosts_file, when given, is the only file the target's host key is looked up in (see
    workers.models.host_keys); identity_file is the one key offered. Without them ssh uses the agent user's
    ~/.ssh, still refusing an unknown host key. bwlimit_kib_s > 0 caps the copy's rate (KiB/s), so copying a
    700 GB model does not take the network the engines serve and talk over."""
    remote = ssh_login(user, host, ssh_port)
    if bwlimit_kib_s < 0:
        raise CommandInputError(f"the copy's bandwidth limit must be 0 or more, not {bwlimit_kib_s}")
    return [
        "rsync",
        "-a",
        "--partial",
        "--info=progress2",
        "--mkpath",
        *([f"--bwlimit={int(bwlimit_kib_s)}"] if bwlimit_kib_s else []),
        # The remote path goes over rsync's protocol, not through the remote login shell: rsync before
        # 3.2.4 (openEuler 22.03 has 3.2.3) hands it to that shell, where `;` or `$(...)` in a name would run.
        "--protect-args",
        "-e",
        " ".join(ssh_command(int(ssh_port), known_hosts_file, identity_file)),
        # The trailing slash copies the folder's contents into target_path rather than a folder inside it.
        normalise(source_path).rstrip("/") + "/",
        f"{remote}:{normalise(target_path)}/",
    ]


def ssh_login(user: str, host: str, ssh_port: int) -> str:
    """user@host (or host) after checking that neither can be read as an option, and the port's range."""
    if user and not SSH_USER.match(user):
        raise CommandInputError(f"{user!r} is not a valid SSH user name")
    if not SSH_HOST.match(host or ""):
        raise CommandInputError(f"{host!r} is not a host name or IP address; set the target node's address")
    if not 0 < int(ssh_port) < 65536:
        raise CommandInputError(f"ssh port {ssh_port} is out of range")
    return f"{user}@{host}" if user else host


def destination_and_parents(target_path: str) -> list[str]:
    """target_path, then each folder above it up to /: /m/q → [/m/q, /m, /]."""
    paths = [normalise(target_path)]
    while paths[-1] != "/":
        paths.append(posixpath.dirname(paths[-1]))
    return paths


def remote_df_argv(
    user: str,
    host: str,
    target_path: str,
    ssh_port: int = 22,
    *,
    known_hosts_file: str = "",
    identity_file: str = "",
) -> list[str]:
    """ssh running `df -Pk -- PATH...` on the target for target_path and each folder above it, over the same
    ssh options rsync_argv uses; df answers for those that exist, so its first row is the nearest one. Then
    `du -sk -- target_path`: what an earlier, interrupted copy already left there, which rsync keeps.

    ssh joins the words after the host with spaces and the target's login shell splits them again, so each
    path goes as one shell-quoted word: a name holding `;`, `$(...)` or a space stays a name."""
    remote = ssh_login(user, host, ssh_port)
    paths = [shlex.quote(path) for path in destination_and_parents(target_path)]
    ssh = ssh_command(int(ssh_port), known_hosts_file, identity_file)
    # du's complaint about a destination that is not there yet is nobody's business; df's status is kept.
    already_there = ["du", "-sk", "--", paths[0], "2>/dev/null"]
    return [*ssh, remote, "df", "-Pk", "--", *paths, ";", "status=$?;", *already_there, "; exit $status"]


def ssh_command(port: int, known_hosts_file: str = "", identity_file: str = "") -> list[str]:
    """The ssh rsync runs. BatchMode makes a missing key or an unknown host key fail at once instead of
    waiting for an answer nobody will type; the keepalives end a dead link within a minute, so a retry can
    resume from the partial files rather than the copy hanging for its whole timeout."""
    for name, value in (("known_hosts file", known_hosts_file), ("identity file", identity_file)):
        # rsync splits -e at white space and reads quotes; a path needing either is refused, not quoted.
        if value and not SSH_OPTION_PATH.match(value):
            raise CommandInputError(f"{name} {value!r} must be an absolute path without spaces or quotes")
    argv = ["ssh", "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    argv += ["-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    if known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={known_hosts_file}", "-o", "GlobalKnownHostsFile=/dev/null"]
        argv += ["-o", f"HostKeyAlias={PINNED_HOST_ALIAS}"]
    if identity_file:
        argv += ["-i", identity_file, "-o", "IdentitiesOnly=yes"]
    return argv


RSYNC_PROGRESS = re.compile(r"^\s*([\d,]+)\s+(\d+)%\s+(\S+/s)\s+(\S+)")


def parse_rsync_progress(line: str) -> tuple[int, int, str, str] | None:
    """(bytes, percent, rate, eta) from an rsync --info=progress2 line, or None."""
    match = RSYNC_PROGRESS.match(line)
    if not match:
        return None
    return int(match.group(1).replace(",", "")), int(match.group(2)), match.group(3), match.group(4)


# (what rsync or ssh says, the hint) — the first that matches a failed copy's output explains it.
RSYNC_FAILURES = (
    (
        "Host key verification failed",
        _(
            "This node does not know the target's SSH host key and trusts none it has not been told of. Add "
            "the target's key to ~/.ssh/known_hosts of the agent's user on this node, after comparing it "
            "with ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the target."
        ),
    ),
    (
        "Permission denied (publickey",
        _(
            "The target refused this node's key. Put this node's public key (of ASCEND_PANEL_SSH_KEY, or the "
            "agent user's ~/.ssh key) into ~/.ssh/authorized_keys of the target user."
        ),
    ),
    (
        "No space left on device",
        _("The target's disk is full: free space under the models root on the target, then retry."),
    ),
    (
        "command not found",
        _("rsync is missing on the target: install it there (dnf install rsync), then retry."),
    ),
)
UNREACHABLE = (
    "Connection refused",
    "Connection timed out",
    "No route to host",
    "Could not resolve",
    "timed out",
)


def explain_rsync_failure(lines: list[str]) -> tuple[str, str]:
    """The line of a failed rsync's output that says why, and what to do about it."""
    said = [line.strip() for line in lines if line.strip() and not line.startswith("$ ")]
    for marker, hint in RSYNC_FAILURES:
        for line in said:
            if marker in line:
                return line, hint
    for line in said:
        if any(marker in line for marker in UNREACHABLE):
            return line, _(
                "This node cannot reach the target over SSH: check the target node's address and SSH port, "
                "that sshd runs there, and that a firewall lets this node through."
            )
    return (said[-1] if said else "no output"), _(
        "The source node must reach the target over SSH without a password (a key in "
        "~/.ssh/authorized_keys of the target user), and rsync must be installed on both."
    )
