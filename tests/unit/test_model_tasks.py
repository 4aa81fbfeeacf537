"""Model task bodies on a host tree (real files, real quantizer), the path guard, the argv builders, and the
copy's free-disk check on the target (df's real output here; over a real sshd in test_model_copy_ssh)."""

import shutil
import subprocess
from types import SimpleNamespace

import pytest

from workers.events import EventEmitter
from workers.models.commands import (
    CommandInputError,
    atc_argv,
    destination_and_parents,
    explain_rsync_failure,
    msmodelslim_argv,
    msmodelslim_model_type,
    parse_rsync_progress,
    remote_df_argv,
    rsync_argv,
    soc_version_for,
)
from workers.models.download import DISK_MARGIN_BYTES
from workers.models.node_paths import UnsafePathError, checked_model_dir, is_inside
from workers.models.target_disk import FreeSpace, TargetDiskError, check_fits, parse_df, parse_du_total
from workers.models.tiny import make_tiny_model
from workers.tasks.models import ModelTaskError, convert_body, delete_body, inspect_body

ROOT = "/data/models"


@pytest.fixture
def host(tmp_path):
    sent = []
    emitter = EventEmitter("op", "n", send=lambda _name, batch, **_: sent.append(batch))
    config = SimpleNamespace(host_root=str(tmp_path), node_name="n", ascend_root=str(tmp_path / "Ascend"))
    make_tiny_model(tmp_path / "data/models/tiny", arch="qwen2")
    return SimpleNamespace(root=tmp_path, emitter=emitter, config=config, sent=sent)


def events(host):
    host.emitter.flush()
    return [e for batch in host.sent for e in batch["events"]]


def test_inspect_reads_a_node_path_under_the_host_root(host):
    result = inspect_body(host.emitter, host.config, path="/data/models/tiny", models_root=ROOT)
    assert result["format"] == "hf"
    assert result["facts"]["architecture"] == "Qwen2ForCausalLM"
    assert result["size_bytes"] > 0


def test_inspect_of_a_folder_without_config_fails_with_a_hint(host):
    (host.root / "data/models/empty").mkdir()
    with pytest.raises(ModelTaskError) as caught:
        inspect_body(host.emitter, host.config, path="/data/models/empty", models_root=ROOT)
    assert caught.value.hint


def test_quantize_writes_a_verified_w8a8_artifact_and_reports_progress(host):
    result = convert_body(
        host.emitter,
        host.config,
        source_path="/data/models/tiny",
        path="/data/models/tiny-w8a8",
        models_root=ROOT,
        target_format="w8a8_dynamic",
    )
    assert result["format"] == "w8a8_dynamic"
    assert result["verification"]["passed"] is True
    assert 0 < result["verification"]["max_relative_error"] <= result["verification"]["bound"]
    assert result["verification"]["relative_error_by_tensor"]
    percents = [e["payload"]["percent"] for e in events(host) if e["kind"] == "progress"]
    assert percents == sorted(percents)
    assert percents[-1] == 100


def test_conversion_refuses_a_destination_outside_the_models_root(host):
    with pytest.raises(UnsafePathError):
        convert_body(
            host.emitter,
            host.config,
            source_path="/data/models/tiny",
            path="/etc/evil",
            models_root=ROOT,
            target_format="w8a8_dynamic",
        )


def test_delete_removes_the_folder_and_its_leftovers_but_never_outside_the_root(host):
    (host.root / "data/models/tiny.partial").mkdir()
    result = delete_body(host.emitter, host.config, path="/data/models/tiny", models_root=ROOT)
    assert sorted(result["removed"]) == ["tiny", "tiny.partial"]
    assert not (host.root / "data/models/tiny").exists()
    for outside in ("/data/models", "/data", "/data/models/../other", "relative/path"):
        with pytest.raises(UnsafePathError):
            delete_body(host.emitter, host.config, path=outside, models_root=ROOT)


def test_a_symlink_inside_the_root_that_leads_outside_is_refused(host):
    (host.root / "elsewhere").mkdir()
    (host.root / "data/models/link").symlink_to(host.root / "elsewhere")
    with pytest.raises(UnsafePathError, match="resolves to"):
        checked_model_dir(str(host.root), "/data/models/link", ROOT)
    assert (host.root / "elsewhere").is_dir()


def test_is_inside_needs_a_path_strictly_below_the_root():
    assert is_inside("/data/models/a", "/data/models/")
    assert not is_inside("/data/models", "/data/models")
    assert not is_inside("/data/modelsX/a", "/data/models")


def test_several_models_roots_each_hold_their_own_folders():
    roots = "/data/models:/srv/models"
    assert is_inside("/srv/models/a", roots)
    assert is_inside("/data/models/a", ["/data/models", "/srv/models"])
    assert not is_inside("/srv/models/../../etc", roots)
    assert not is_inside("/srv", roots)


def test_inspect_reads_nothing_outside_the_models_root(host):
    (host.root / "etc").mkdir(exist_ok=True)
    (host.root / "data/models/etc-link").symlink_to(host.root / "etc")
    for outside in ("/etc", "/data/models/../../etc", "/data/models/etc-link"):
        with pytest.raises(UnsafePathError):
            inspect_body(host.emitter, host.config, path=outside, models_root=ROOT)


def test_atc_argv_carries_framework_soc_and_shape_as_single_arguments():
    argv = atc_argv("/m/yolo.onnx", "/m/out/model", "Ascend310P3", "images:1,3,640,640", "NCHW")
    assert argv == [
        "atc",
        "--model=/m/yolo.onnx",
        "--framework=5",
        "--output=/m/out/model",
        "--soc_version=Ascend310P3",
        "--input_format=NCHW",
        "--input_shape=images:1,3,640,640",
        "--log=error",
    ]


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("soc_version", {"soc_version": "910B; rm -rf /"}),
        ("input_shape", {"input_shape": "images:1,3 --framework=0"}),
        ("input_format", {"input_format": "BGR"}),
    ],
)
def test_atc_argv_refuses_input_it_cannot_take(field, kwargs):
    arguments = {"soc_version": "Ascend910B3", "input_shape": "x:1,3", "input_format": "NCHW", **kwargs}
    with pytest.raises(CommandInputError, match=field):
        atc_argv("/m/a.onnx", "/m/out/model", **arguments)


def test_the_soc_version_comes_from_the_npu_smi_chip_name():
    assert soc_version_for("910B3") == "Ascend910B3"
    assert soc_version_for("310P3") == "Ascend310P3"
    with pytest.raises(CommandInputError):
        soc_version_for("")


@pytest.mark.parametrize("name", ["Ascend910", "910"])
def test_a_chip_name_that_does_not_tell_the_soc_asks_for_it(name):
    # An Atlas A3 host's npu-smi says only "Ascend910" (shared sample npu-smi-info_A3-Ascend910_01.txt).
    with pytest.raises(CommandInputError, match="enter the SoC version"):
        soc_version_for(name)


def test_an_a3_soc_version_given_by_hand_is_taken():
    argv = atc_argv("/m/a.onnx", "/m/out/model", "Ascend910_9382", "x:1,3", "NCHW")
    assert "--soc_version=Ascend910_9382" in argv
    with pytest.raises(CommandInputError, match="soc_version"):
        atc_argv("/m/a.onnx", "/m/out/model", "Ascend910_93a2", "x:1,3", "NCHW")


def test_msmodelslim_and_rsync_argv():
    assert msmodelslim_argv("/m/q", "/m/q-w8a8", "w8a8", "cpu", "Qwen2.5-7B-Instruct") == [
        "msmodelslim",
        "quant",
        "--model_type",
        "Qwen2.5-7B-Instruct",
        "--model_path",
        "/m/q",
        "--save_path",
        "/m/q-w8a8",
        "--device",
        "cpu",
        "--quant_type",
        "w8a8",
    ]
    with pytest.raises(CommandInputError, match="model_type"):
        msmodelslim_argv("/m/q", "/m/q-w8a8", "w8a8", "npu", "--config=/tmp/x")
    assert msmodelslim_model_type("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b") == "Qwen2.5-7B-Instruct"
    assert msmodelslim_model_type("", "tiny") == "tiny"
    argv = rsync_argv("/data/models/q", "ascend", "10.0.0.2", "/data/models/q", 2222)
    assert argv[:4] == ["rsync", "-a", "--partial", "--info=progress2"]
    assert argv[-2:] == ["/data/models/q/", "ascend@10.0.0.2:/data/models/q/"]
    assert argv[-3].startswith("ssh -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=yes ")
    with pytest.raises(CommandInputError):
        rsync_argv("/data/models/q", "ascend", "-oProxyCommand=x", "/data/models/q")


def test_a_copy_keeps_to_its_bandwidth_limit():
    assert not any(a.startswith("--bwlimit") for a in rsync_argv("/m/q", "root", "10.0.0.2", "/m/q"))
    limited = rsync_argv("/m/q", "root", "10.0.0.2", "/m/q", bwlimit_kib_s=51200)
    assert "--bwlimit=51200" in limited
    assert limited.index("--bwlimit=51200") < limited.index("-e")  # an option, before the paths
    with pytest.raises(CommandInputError, match="bandwidth limit"):
        rsync_argv("/m/q", "root", "10.0.0.2", "/m/q", bwlimit_kib_s=-1)


def test_the_agent_reads_its_copy_limit(monkeypatch):
    from workers.agent_config import AgentConfig

    monkeypatch.setenv("ASCEND_PANEL_NODE_NAME", "n1")
    assert AgentConfig.from_env().copy_bwlimit_kib_s == 0
    monkeypatch.setenv("ASCEND_PANEL_COPY_BWLIMIT_KIB_S", "102400")
    assert AgentConfig.from_env().copy_bwlimit_kib_s == 102400
    monkeypatch.setenv("ASCEND_PANEL_COPY_BWLIMIT_KIB_S", "100M")
    with pytest.raises(SystemExit, match="whole number"):
        AgentConfig.from_env()


def test_a_pinned_copy_trusts_only_its_known_hosts_file_and_offers_only_its_key():
    argv = rsync_argv(
        "/m/q", "root", "10.0.0.2", "/m/q", known_hosts_file="/tmp/c/known_hosts", identity_file="/etc/k"
    )
    ssh = argv[argv.index("-e") + 1].split()
    assert "UserKnownHostsFile=/tmp/c/known_hosts" in ssh
    assert "GlobalKnownHostsFile=/dev/null" in ssh
    assert ssh[ssh.index("-i") + 1] == "/etc/k"
    assert "IdentitiesOnly=yes" in ssh
    # rsync splits -e at spaces, so a path with one would become two words: refused rather than quoted.
    with pytest.raises(CommandInputError, match="identity file"):
        rsync_argv("/m/q", "root", "10.0.0.2", "/m/q", identity_file="/etc/my key")
    with pytest.raises(CommandInputError, match="identity file"):
        rsync_argv("/m/q", "root", "10.0.0.2", "/m/q", identity_file="relative/key")


@pytest.mark.parametrize(
    ("said", "hint"),
    [
        ("Host key verification failed.", "known_hosts"),
        ("root@10.0.0.2: Permission denied (publickey).", "authorized_keys"),
        ('rsync: [receiver] write failed on "/m/q/x": No space left on device (28)', "disk is full"),
        ("bash: line 1: rsync: command not found", "install it there"),
        ("ssh: connect to host 10.0.0.2 port 22: Connection refused", "cannot reach the target"),
        ("ssh: connect to host 10.0.0.2 port 22: Connection timed out", "cannot reach the target"),
    ],
)
def test_a_failed_rsync_is_explained_by_the_line_that_says_why(said, hint):
    closed = "rsync: connection unexpectedly closed (0 bytes received so far) [sender]"
    lines = ["$ rsync -a ...", said, closed]
    reason, explained = explain_rsync_failure(lines)
    assert reason == said
    assert hint in explained


def test_an_unrecognised_rsync_failure_gives_its_last_line_and_the_general_hint():
    reason, hint = explain_rsync_failure(["$ rsync", "rsync error: some error (code 23)"])
    assert reason == "rsync error: some error (code 23)"
    assert "authorized_keys" in hint


def test_rsync_progress2_lines_are_parsed():
    assert parse_rsync_progress("  1,234,567  42%   10.50MB/s    0:01:02") == (
        1234567,
        42,
        "10.50MB/s",
        "0:01:02",
    )
    assert parse_rsync_progress("sending incremental file list") is None


def remote_df(tmp_path, target_path: str) -> tuple[list[str], subprocess.CompletedProcess]:
    """remote_df_argv's command run the way sshd runs it: its words joined by spaces, given to sh -c."""
    argv = remote_df_argv("root", "10.0.0.2", target_path, 2222, known_hosts_file="/tmp/c/kh")
    words = argv[argv.index("root@10.0.0.2") + 1 :]
    ran = subprocess.run(["sh", "-c", " ".join(words)], capture_output=True, text=True, cwd=tmp_path)
    return argv, ran


def test_the_free_disk_question_goes_over_the_pinned_ssh_and_finds_the_nearest_existing_folder(tmp_path):
    argv, ran = remote_df(tmp_path, f"{tmp_path}/models/q")
    rsync = rsync_argv("/m/q", "root", "10.0.0.2", "/m/q", 2222, known_hosts_file="/tmp/c/kh")
    assert " ".join(argv[: argv.index("root@10.0.0.2")]) == rsync[rsync.index("-e") + 1]
    asked = destination_and_parents(f"{tmp_path}/models/q")
    assert asked[:3] == [f"{tmp_path}/models/q", f"{tmp_path}/models", str(tmp_path)]
    assert asked[-1] == "/"
    space = parse_df(ran.stdout, asked)
    assert space.path == str(tmp_path)  # models/q and models do not exist: df has no row for them
    # Free space moves while the machine works; a megabyte apart still tells a right parse from a wrong one.
    assert abs(space.free_bytes - shutil.disk_usage(tmp_path).free) < 1024**2
    assert str(tmp_path).startswith(space.mount_point)


def test_what_an_interrupted_copy_left_at_the_destination_is_counted(tmp_path):
    destination = tmp_path / "models" / "q"
    destination.mkdir(parents=True)
    (destination / "model-00001-of-00002.safetensors").write_bytes(b"w" * 300_000)
    _argv, ran = remote_df(tmp_path, str(destination))
    asked = destination_and_parents(str(destination))
    assert parse_df(ran.stdout, asked).path == str(destination)
    present = parse_du_total(ran.stdout, str(destination))
    assert 300_000 <= present < 300_000 + 64 * 1024  # du counts allocated blocks
    assert ran.returncode == 0  # df's status, which du's does not replace


def test_a_destination_that_is_not_there_yet_holds_nothing(tmp_path):
    _argv, ran = remote_df(tmp_path, f"{tmp_path}/models/q")
    assert parse_du_total(ran.stdout, f"{tmp_path}/models/q") == 0
    assert "du:" not in ran.stderr


def test_a_target_path_the_shell_would_act_on_reaches_df_as_one_name(tmp_path):
    hostile = f"{tmp_path}/m; touch {tmp_path}/pwned $(touch {tmp_path}/pwned2)"
    _argv, ran = remote_df(tmp_path, hostile)
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "pwned2").exists()
    asked = destination_and_parents(hostile)
    missing = asked.index(str(tmp_path))  # folders named after pieces of the command, none of them there
    assert ran.stderr.count("No such file or directory") == missing > 0
    assert parse_df(ran.stdout, asked).path == str(tmp_path)


def test_df_rows_with_spaces_in_names_are_read_and_a_rowless_answer_is_none():
    output = (
        "Filesystem     1024-blocks     Used Available Capacity Mounted on\n"
        "//nas/models share 1000000 400000 600000 40% /mnt/model store\n"
        "/dev/vda 264212084 30982528 75408384 30% /\n"
        "/dev/vda 264212084 30982528 75408384 30% /\n"
    )
    space = parse_df(output, ["/mnt/model store/q", "/mnt/model store", "/mnt", "/"])
    assert space == FreeSpace(
        path="/mnt/model store", free_bytes=600000 * 1024, mount_point="/mnt/model store"
    )
    assert parse_df("Filesystem 1024-blocks Used Available Capacity Mounted on\n", ["/m", "/"]) is None
    assert parse_df("", ["/"]) is None


def test_a_copy_fits_only_with_the_margin_left_free():
    space = FreeSpace(path="/data/models", free_bytes=20 * 1024**3, mount_point="/data")
    check_fits(space.free_bytes - DISK_MARGIN_BYTES, space, "node-b")
    with pytest.raises(TargetDiskError) as refused:
        check_fits(space.free_bytes - DISK_MARGIN_BYTES + 1, space, "node-b")
    message = str(refused.value)
    assert message.startswith("not enough disk space on node-b at /data/models: the copy needs 19.00 GiB")
    assert "20.00 GiB are free on /data" in message
    assert "nothing was copied" in message
    assert "Free disk space on the target node" in refused.value.hint


def test_a_retry_needs_room_only_for_what_the_cut_off_copy_did_not_leave():
    space = FreeSpace(
        path="/data/models/q", free_bytes=5 * 1024**3, mount_point="/data", present_bytes=30 * 1024**3
    )
    check_fits(34 * 1024**3, space, "node-b")  # 4 GiB still to write, plus the margin, in 5 GiB free
    with pytest.raises(TargetDiskError) as refused:
        check_fits(35 * 1024**3, space, "node-b")
    assert "the copy needs 35.00 GiB, 30.00 GiB of it already there (+1 GiB margin)" in str(refused.value)
