"""Talking to docker, podman and iSula: each engine's argv for what the panel asks, reading their answers
(as they print them: docker's JSON lines, podman's JSON, iSula's text and table), the pull progress, the
host's container settings, the log follower's times, and the official images with their preflight."""

import json

import pytest

from workers.containers import commands
from workers.containers.follow import split_stamp, time_key
from workers.containers.hostconf import ContainerHost, HostConfigError, choose_engine, parse_mounts
from workers.containers.official import identify, official_images, preflight
from workers.containers.parse import PullProgress, parse_images, parse_inspect, parse_size, parse_version
from workers.engine.launch.container import Mount


@pytest.mark.parametrize(
    ("engine", "argv"),
    [
        ("docker", ["docker", "version", "--format", "{{json .}}"]),
        ("podman", ["podman", "version", "--format", "json"]),
        ("isula", ["isula", "version"]),
    ],
)
def test_each_engine_is_asked_its_version_its_own_way(engine, argv):
    assert commands.version(engine) == argv


def test_images_logs_and_containers_use_each_engines_documented_flags():
    assert commands.list_images("docker") == ["docker", "images", "--no-trunc", "--format", "{{json .}}"]
    assert commands.list_images("isula") == ["isula", "images"]
    assert commands.logs("podman", "abc", since="2026-01-01T00:00:00Z") == [
        "podman", "logs", "-f", "--timestamps", "--since", "2026-01-01T00:00:00Z", "abc",
    ]  # fmt: skip
    assert commands.logs("isula", "abc", since="2026-01-01T00:00:00Z") == [
        "isula",
        "logs",
        "-f",
        "--tail",
        "0",
        "abc",
    ]
    assert commands.find_by_label("isula", "ascend-panel.deployment", "q") == [
        "isula", "ps", "-a", "-q", "--no-trunc", "--filter", "label=ascend-panel.deployment=q",
    ]  # fmt: skip
    assert commands.stop("docker", "abc", 12.7) == ["docker", "stop", "-t", "12", "abc"]
    assert commands.inspect("podman", "abc") == ["podman", "inspect", "--type", "container", "abc"]
    assert commands.inspect("isula", "abc") == ["isula", "inspect", "abc"]
    assert commands.load("isula", "/var/lib/x.tar") == ["isula", "load", "-i", "/var/lib/x.tar"]


@pytest.mark.parametrize(
    "call",
    [
        lambda: commands.pull("docker", "--help"),
        lambda: commands.remove("podman", "-f"),
        lambda: commands.load("docker", "relative.tar"),
        lambda: commands.version("lxc"),
    ],
)
def test_nothing_that_reads_as_an_option_or_another_engine_passes(call):
    with pytest.raises(ValueError, match="engine must be|not an image|not a container|absolute path"):
        call()


def test_versions_and_whether_the_daemon_answers():
    down = parse_version(
        "docker",
        1,
        json.dumps({"Client": {"Version": "28.2.2"}, "Server": None}),
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    )
    assert (down.client, down.server, down.reachable) == ("28.2.2", "", False)
    assert "Cannot connect" in down.error
    podman = parse_version("podman", 0, json.dumps({"Client": {"Version": "4.3.1"}}), "")
    assert (podman.client, podman.reachable) == ("4.3.1", True)
    isula = parse_version(
        "isula", 0, "Client:\n  Version:\t2.1.5\n  Git commit:\tabc\n\nServer:\n  Version:\t2.1.5\n", ""
    )
    assert (isula.client, isula.server, isula.reachable) == ("2.1.5", "2.1.5", True)


def test_image_lists_of_the_three_engines():
    docker = parse_images(
        "docker",
        json.dumps(
            {"Repository": "quay.io/ascend/vllm-ascend", "Tag": "v0.11.0", "ID": "sha256:0123456789abcdef",
             "Size": "15.2GB", "CreatedAt": "2025-10-01 10:00:00 +0800 CST"}
        ),
    )  # fmt: skip
    assert docker[0].reference == "quay.io/ascend/vllm-ascend:v0.11.0"
    assert (docker[0].id, docker[0].size_bytes) == ("0123456789ab", 15_200_000_000)
    podman = parse_images(
        "podman",
        json.dumps(
            [{"Id": "fb74f659", "Names": ["localhost:5000/a/b:1", "localhost/c:2"], "Size": 81, "Created": 0}]
        ),
    )
    assert [i.reference for i in podman] == ["localhost:5000/a/b:1", "localhost/c:2"]
    isula = parse_images(
        "isula",
        "REPOSITORY                     TAG        IMAGE ID             CREATED              SIZE\n"
        "quay.io/ascend/vllm-ascend     v0.11.0    0123456789ab         2025-10-01 10:00:00  15.2GB\n",
    )
    assert (isula[0].reference, isula[0].created, isula[0].size_bytes) == (
        "quay.io/ascend/vllm-ascend:v0.11.0",
        "2025-10-01 10:00:00",
        15_200_000_000,
    )
    assert parse_size("8.11 MB") == 8_110_000


def test_a_containers_state_with_its_exit_code_and_oom_kill():
    record = {
        "Id": "abc123",
        "Name": "/ascend-panel-q",
        "Config": {"Image": "quay.io/ascend/vllm-ascend:v0.11.0", "Labels": {"ascend-panel.deployment": "q"}},
        "State": {"Status": "exited", "Running": False, "Pid": 0, "ExitCode": 137, "OOMKilled": True},
    }
    docker = parse_inspect(json.dumps([record]))
    assert (docker.name, docker.exit_code, docker.oom_killed, docker.running) == (
        "ascend-panel-q",
        137,
        True,
        False,
    )
    assert docker.labels == {"ascend-panel.deployment": "q"}
    assert parse_inspect(json.dumps(record)).id == "abc123"  # iSula prints one object
    assert parse_inspect("Error: no such container") is None


def test_docker_pull_progress_counts_layers_and_never_goes_back():
    progress = PullProgress()
    seen = [
        progress.feed(line)
        for line in (
            "v0.11.0: Pulling from ascend/vllm-ascend",
            "aaaaaaaaaaaa: Pulling fs layer",
            "bbbbbbbbbbbb: Pulling fs layer",
            "aaaaaaaaaaaa: Pull complete",
            "bbbbbbbbbbbb: Downloading",
            "bbbbbbbbbbbb: Pull complete",
            "Digest: sha256:" + "0" * 64,
        )
    ]
    assert [p for p in seen if p is not None] == [45, 90, 95]


def test_podman_pull_progress_ends_at_the_config():
    progress = PullProgress()
    progress.feed("Copying blob sha256:" + "a" * 64)
    progress.feed("Copying blob sha256:" + "b" * 64 + " done")
    assert progress.percent == 45
    assert progress.feed("Copying config sha256:" + "c" * 64) == 95


def test_the_hosts_container_settings():
    host = ContainerHost.from_env(
        {
            "ASCEND_PANEL_CONTAINER_ENGINE": "isula",
            "ASCEND_PANEL_CONTAINER_MOUNTS": "/opt/tools, /srv/data:/data:rw",
            "ASCEND_PANEL_CONTAINER_ENV": "HTTPS_PROXY,HF_ENDPOINT",
            "ASCEND_PANEL_CONTAINER_CACHE": "",
        }
    )
    assert host.engine == "isula"
    assert host.mounts == (Mount("/opt/tools", "/opt/tools"), Mount("/srv/data", "/data", read_only=False))
    assert (host.env_names, host.cache_dir) == (("HTTPS_PROXY", "HF_ENDPOINT"), None)
    assert host.passed_env({"HTTPS_PROXY": "p"}) == {"HTTPS_PROXY": "p"}
    with pytest.raises(HostConfigError, match="MOUNTS"):
        parse_mounts("relative:/x")
    with pytest.raises(HostConfigError, match="ENGINE"):
        ContainerHost.from_env({"ASCEND_PANEL_CONTAINER_ENGINE": "lxc"})


def test_the_engine_is_the_configured_one_or_the_first_that_answers():
    engines = [{"name": "docker", "reachable": False}, {"name": "podman", "reachable": True}]
    assert choose_engine("", engines) == "podman"
    assert choose_engine("docker", engines) is None
    assert (
        choose_engine("", [{"name": "isula", "reachable": True}, {"name": "docker", "reachable": True}])
        == "docker"
    )


def test_follower_lines_are_ordered_by_time_whatever_their_precision():
    assert split_stamp("2026-12-03T11:16:44.182121581Z INFO started") == (
        "2026-12-03T11:16:44.182121581Z",
        "INFO started",
    )
    assert split_stamp("--- ascend-panel: starting") == ("", "--- ascend-panel: starting")
    assert time_key("2026-12-03T11:16:44.5Z") > time_key("2026-12-03T11:16:44.182121581Z")


def test_official_images_name_their_release_chip_and_sources():
    a3 = official_images("0.13.0", "a3")
    assert [i.reference for i in a3] == [
        "quay.io/ascend/vllm-ascend:v0.13.0-a3",
        "quay.io/ascend/vllm-ascend:v0.13.0-a3-openeuler",
    ]
    assert all(i.sources for i in official_images())
    assert official_images("0.13.0", "310p") == []  # that release built no 310P image
    assert identify("quay.io/ascend/vllm-ascend:v0.11.0-310p-openeuler") == ("0.11.0", "-310p-openeuler")
    assert identify("localhost/my-build:v0.11.0") is None


def test_the_preflight_names_a_wrong_chip_and_a_driver_older_than_the_images_cann():
    wrong_chip = preflight("quay.io/ascend/vllm-ascend:v0.13.0-a3", chip="910b", driver=None)
    assert [p.component for p in wrong_chip] == ["chip"]
    assert "quay.io/ascend/vllm-ascend:v0.13.0 or" in wrong_chip[0].hint
    old_driver = preflight("quay.io/ascend/vllm-ascend:v0.13.0", chip="910b", driver="24.1.0")
    assert [p.component for p in old_driver] == ["driver"]
    assert "CANN 8.5.0" in old_driver[0].hint
    assert preflight("quay.io/ascend/vllm-ascend:v0.13.0", chip="910b", driver="25.2.0") == []
    assert [
        p.component for p in preflight("quay.io/ascend/vllm-ascend:v9.9.9", chip="910b", driver=None)
    ] == ["image"]
    assert preflight("localhost/site-build:v1", chip="910b", driver="1.0") == []


def test_the_numa_cpuset_is_what_this_machines_kernel_lets_the_agent_use(tmp_path):
    import os

    from workers.containers.launchplan import cpu_list, numa_cpuset

    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    node = tmp_path / "sys/devices/system/node/node0"
    node.mkdir(parents=True)
    node.joinpath("cpulist").write_text("0-4095\n")
    cpus, mems = numa_cpuset(str(tmp_path), 0)
    assert cpus == cpu_list(sorted(os.sched_getaffinity(0)))
    assert mems == ("0" if os.path.isdir("/sys/devices/system/node/node0") else None)
    assert numa_cpuset(str(tmp_path), 7) == (None, None)  # a node this host does not describe
    assert numa_cpuset(str(tmp_path), None) == (None, None)
