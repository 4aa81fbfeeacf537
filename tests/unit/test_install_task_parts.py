"""The agent side of provisioning: chip keys, which store files a plan needs, the pip source."""

from workers.steps.base import StepSpec
from workers.tasks.install_host import HostPaths, chip_key
from workers.tasks.install_sources import needed_files, pip_source

OFFER = [
    {"name": "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run", "kind": "toolkit"},
    {"name": "Ascend-hdk-910b-npu-driver_25.3.rc1_linux-aarch64.run", "kind": "driver"},
    {"name": "torch-2.7.1-py3-none-any.whl", "kind": "wheel"},
]


def run_step(name):
    return StepSpec("cann_toolkit", "t", "run_package", {"path": f"/pkgs/{name}"})


def test_chip_keys_follow_npu_smi_names():
    assert [chip_key(n) for n in ("910B3", "310P3", "Ascend910", "910ProB", "310B1", "")] == [
        "910b",
        "310p",
        "a3",
        "910",
        "310b",
        None,
    ]


def test_a_plan_fetches_only_its_run_packages_and_wheels_only_for_the_wheelhouse():
    plan = [run_step(OFFER[0]["name"]), StepSpec("pip_torch", "p", "pip_install", {})]
    assert [f["name"] for f in needed_files(plan, OFFER, use_wheelhouse=True)] == [
        OFFER[0]["name"],
        OFFER[2]["name"],
    ]
    assert [f["name"] for f in needed_files(plan, OFFER, use_wheelhouse=False)] == [OFFER[0]["name"]]
    assert needed_files([], OFFER, use_wheelhouse=True) == []


def test_the_pip_source_is_the_wheelhouse_or_the_configured_index():
    assert pip_source({"wheelhouse": True}, "/w").pip_args() == ["--no-index", "--find-links", "/w"]
    assert pip_source(
        {"index_url": "http://mirror/simple", "extra_index_urls": ["http://x"]}, "/w"
    ).pip_args() == [
        "--index-url",
        "http://mirror/simple",
        "--extra-index-url",
        "http://x",
    ]
    assert pip_source({}, "/w").pip_args() == []


def test_a_sim_host_keeps_its_files_under_its_root():
    paths = HostPaths.for_host("/srv/sim-a2", "/srv/sim-a2/usr/local/Ascend")
    assert paths.packages_dir == "/srv/sim-a2/var/lib/ascend-panel/packages"
    assert paths.wheelhouse == "/srv/sim-a2/var/lib/ascend-panel/packages/wheelhouse"
    assert HostPaths.for_host("/", "/usr/local/Ascend").venv_root == "/opt/ascend-panel/venvs"
