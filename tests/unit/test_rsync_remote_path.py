"""A model folder whose name holds shell syntax is copied under that name and never runs as a command on the
target node, even with the pre-3.2.4 rsync argument handling that openEuler 22.03 ships (RSYNC_OLD_ARGS=1
asks a newer rsync for it). A stand-in `ssh` runs the remote command in a local shell, as sshd would."""

import os
import shutil
import subprocess

import pytest

from workers.models.commands import rsync_argv

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")

STAND_IN_SSH = """#!/bin/sh
# Skip ssh's options and the host, then hand the remote command to a shell, as sshd does.
while [ $# -gt 0 ]; do
    case "$1" in
        -p | -o | -l) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
shift
exec sh -c "$*"
"""


def test_a_folder_name_with_shell_syntax_is_copied_not_run(tmp_path):
    bin_dir, source = tmp_path / "bin", tmp_path / "models" / "qwen"
    bin_dir.mkdir()
    source.mkdir(parents=True)
    (source / "config.json").write_text("{}")
    ssh = bin_dir / "ssh"
    ssh.write_text(STAND_IN_SSH)
    ssh.chmod(0o755)
    marker = tmp_path / "ran"
    target = f"{tmp_path}/target/qwen;touch {marker};echo x"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RSYNC_OLD_ARGS": "1"}

    done = subprocess.run(
        rsync_argv(str(source), "ascend", "10.0.0.2", target), env=env, capture_output=True, text=True
    )

    assert not marker.exists()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "target" / f"qwen;touch {marker};echo x" / "config.json").is_file()
