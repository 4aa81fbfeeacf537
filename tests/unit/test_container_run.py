"""The `run -d` line of each container engine, against the flags each documents: docker (docs.docker.com
`docker run`), podman (podman-run(1)) and iSula (its CLI's option table, src/cmd/isula/base/create.h:
--net, --device, -v, -e, --env-file, --label, --shm-size, --cpuset-cpus/-mems, --entrypoint; no
--network, and -p only on a CNI network)."""

import shlex
from dataclasses import replace

import pytest

from workers.engine.launch.command import LaunchSpec, LaunchSpecError, MultiNode
from workers.engine.launch.container import ContainerSpec, Mount, build_container_run

QWEN = LaunchSpec(
    model_path="/models/Qwen2.5-72B-Instruct",
    served_model_name="qwen2.5-72b",
    port=8000,
    log_path="/var/log/qwen.log",
    tensor_parallel_size=4,
    logic_ids=(4, 5, 6, 7),
    numa_node=1,
    venv_path="/opt/venv",
)
SPEC = ContainerSpec(
    launch=QWEN,
    name="ascend-panel-qwen72b",
    image="quay.io/ascend/vllm-ascend:v0.11.0",
    device_ids=(4, 5, 6, 7),
    labels=(("ascend-panel.deployment", "qwen72b"),),
)


def values(argv, flag):
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def after_image(argv, image="quay.io/ascend/vllm-ascend:v0.11.0"):
    return argv[argv.index(image) + 1 :]


def test_docker_runs_detached_with_the_npus_the_driver_and_the_model_read_only():
    argv = build_container_run(SPEC).argv
    assert argv[:5] == ["docker", "run", "-d", "--name", "ascend-panel-qwen72b"]
    assert values(argv, "--label") == ["ascend-panel.deployment=qwen72b"]
    assert values(argv, "--network") == ["host"]
    assert values(argv, "--device") == [
        "/dev/davinci4",
        "/dev/davinci5",
        "/dev/davinci6",
        "/dev/davinci7",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]
    mounts = values(argv, "-v")
    for path in ("/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64"):
        assert f"{path}:{path}:ro" in mounts
    assert "/etc/ascend_install.info:/etc/ascend_install.info:ro" in mounts
    assert "/models/Qwen2.5-72B-Instruct:/models/Qwen2.5-72B-Instruct:ro" in mounts
    assert "/var/lib/ascend-panel/cache:/root/.cache:rw" in mounts
    assert values(argv, "--shm-size") == ["16g"]


def test_the_launch_runs_as_the_entrypoint_with_the_images_cann_and_no_host_venv():
    argv = build_container_run(SPEC).argv
    assert values(argv, "--entrypoint") == ["bash"]
    inner = after_image(argv)
    assert inner[0] == "-c"
    assert "/usr/local/Ascend/ascend-toolkit/set_env.sh" in inner
    assert "python3" in inner
    assert "/opt/venv/bin/python" not in inner
    assert "numactl" not in inner


def test_the_container_leaves_device_numbering_to_the_runtime_and_binds_cpus_by_cpuset():
    argv = build_container_run(replace(SPEC, cpuset_cpus="24-47", cpuset_mems="1")).argv
    env = values(argv, "-e")
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in env
    assert not any(item.startswith("ASCEND_RT_VISIBLE_DEVICES=") for item in env)
    assert (values(argv, "--cpuset-cpus"), values(argv, "--cpuset-mems")) == (["24-47"], ["1"])


def test_podman_takes_the_same_line():
    argv = build_container_run(replace(SPEC, engine="podman")).argv
    assert argv[:3] == ["podman", "run", "-d"]
    assert values(argv, "--network") == ["host"]


def test_isula_names_host_networking_net_and_refuses_a_published_port():
    argv = build_container_run(replace(SPEC, engine="isula")).argv
    assert argv[0] == "isula"
    assert values(argv, "--net") == ["host"]
    assert "--network" not in argv
    with pytest.raises(LaunchSpecError, match="CNI network"):
        build_container_run(replace(SPEC, engine="isula", host_network=False))


def test_a_published_port_listens_inside_and_publishes_on_the_asked_host():
    argv = build_container_run(replace(SPEC, host_network=False)).argv
    assert values(argv, "-p") == ["127.0.0.1:8000:8000"]
    assert values(after_image(argv), "--host") == ["0.0.0.0"]  # noqa: S104


def test_the_ascend_docker_runtime_takes_visible_devices_instead_of_device_nodes():
    default = build_container_run(replace(SPEC, ascend_runtime="default")).argv
    assert "--device" not in default
    assert "ASCEND_VISIBLE_DEVICES=4,5,6,7" in values(default, "-e")
    assert not any("/usr/local/Ascend/driver" in mount for mount in values(default, "-v"))
    named = build_container_run(replace(SPEC, ascend_runtime="ascend")).argv
    assert values(named, "--runtime") == ["ascend"]
    with pytest.raises(LaunchSpecError, match="podman"):
        build_container_run(replace(SPEC, engine="podman", ascend_runtime="default"))


def test_secrets_and_host_variables_travel_by_name_only():
    spec = replace(SPEC, env_from_host=("HTTPS_PROXY",))
    run = build_container_run(spec, {"HTTPS_PROXY": "http://proxy:3128", "OTHER": "x"})
    assert "-e" in run.argv
    assert "HTTPS_PROXY" in values(run.argv, "-e")
    assert "http://proxy:3128" not in " ".join(run.argv)
    assert run.cli_env == {"HTTPS_PROXY": "http://proxy:3128"}


def test_isula_reads_what_travels_by_name_from_an_env_file():
    spec = replace(SPEC, engine="isula", env_from_host=("HTTPS_PROXY",), env_file="/var/lib/x/.q.env")
    run = build_container_run(spec, {"HTTPS_PROXY": "http://proxy:3128"})
    assert values(run.argv, "--env-file") == ["/var/lib/x/.q.env"]
    assert run.env_file_text == "HTTPS_PROXY=http://proxy:3128\n"
    assert run.cli_env == {}
    with pytest.raises(LaunchSpecError, match="env_file"):
        build_container_run(replace(spec, env_file=None), {"HTTPS_PROXY": "x"})


def test_a_simulated_host_lends_its_own_tree_at_the_real_paths():
    argv = build_container_run(replace(SPEC, host_root="/srv/sim", model_source="/tmp/m")).argv
    assert "/srv/sim/dev/davinci4:/dev/davinci4" in values(argv, "--device")
    assert "/srv/sim/usr/local/dcmi:/usr/local/dcmi:ro" in values(argv, "-v")
    assert "/tmp/m:/models/Qwen2.5-72B-Instruct:ro" in values(argv, "-v")


def test_a_cpu_launch_gets_no_devices_and_runs_the_images_python():
    cpu = replace(QWEN, chip="cpu", tensor_parallel_size=1, logic_ids=(), numa_node=None)
    run = build_container_run(replace(SPEC, launch=cpu, device_ids=(), image="localhost/vllm-cpu:v1"))
    assert "--device" not in run.argv
    assert values(run.argv, "--entrypoint") == ["python3"]
    assert after_image(run.argv, "localhost/vllm-cpu:v1")[:2] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_extra_mounts_follow_the_hosts_policy():
    spec = replace(
        SPEC, extra_mounts=(Mount("/opt/tools", "/opt/tools"), Mount("/srv/x", "/x", read_only=False))
    )
    mounts = values(build_container_run(spec).argv, "-v")
    assert mounts[-2:] == ["/opt/tools:/opt/tools:ro", "/srv/x:/x:rw"]


def test_the_line_is_one_argv_for_the_shell_too():
    argv = build_container_run(SPEC).argv
    assert shlex.split(shlex.join(argv)) == argv


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"device_ids": (4, 5)}, "device_ids"),
        ({"device_ids": ()}, "device_ids"),
        ({"device_ids": (4, 4, 5, 6)}, "repeats"),
        ({"name": "-rm"}, "name"),
        ({"image": "quay.io/ascend/vllm-ascend:v0.11.0; reboot"}, "image"),
        ({"image": "--privileged"}, "image"),
        ({"engine": "lxc"}, "engine"),
        ({"shm_size": "lots"}, "shm_size"),
        ({"cpuset_cpus": "0-23 --privileged"}, "cpuset_cpus"),
        ({"labels": (("Bad Key", "x"),)}, "label"),
        ({"cache_dir": "relative/cache"}, "cache_dir"),
        ({"extra_mounts": (Mount("/a:b", "/a"),)}, "mount"),
        ({"env_from_host": ("NOT-A-NAME",)}, "env_from_host"),
        ({"ascend_runtime": "yes"}, "ascend_runtime"),
    ],
)
def test_it_rejects_wrong_container_fields(change, field):
    with pytest.raises(LaunchSpecError, match=field):
        build_container_run(replace(SPEC, **change))


def test_a_multi_node_launch_keeps_host_networking():
    node = MultiNode("head", 1, 0, "10.0.0.1", 13345, "10.0.0.1", "eth0")
    spec = replace(SPEC, launch=replace(QWEN, data_parallel_size=2, multi_node=node), host_network=False)
    with pytest.raises(LaunchSpecError, match="host networking"):
        build_container_run(spec)
