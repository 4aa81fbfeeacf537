"""Install steps run with the real LocalRunner against simulated packages in a temporary Ascend root."""

import sys
from pathlib import Path

import pytest

from workers.ascend.compat import profile_for
from workers.hosts.local import LocalRunner
from workers.sim.installers import make_sim_package
from workers.steps.base import (
    DONE,
    SKIPPED,
    RebootRequired,
    StepContext,
    StepFailed,
    StepSpec,
    run_step,
    run_steps,
)
from workers.steps.install import BOOT_ID, build_step
from workers.steps.plan import InstallOptions, plan_install

PROFILE = profile_for("0.11.0")  # CANN 8.3.RC2


@pytest.fixture
def sim(tmp_path):
    packages = tmp_path / "packages"
    for kind, version in [
        ("driver", "25.3.rc1"),
        ("firmware", "7.8.0.2.212"),
        ("toolkit", "8.3.RC2"),
        ("ops", "8.3.RC2"),
        ("nnal", "8.3.RC2"),
    ]:
        make_sim_package(kind, version, packages, hdk_version="25.3.rc1")
    events = []
    ctx = StepContext(
        runner=LocalRunner(),
        emit=lambda kind, payload: events.append((kind, payload)),
        ascend_root=str(tmp_path / "Ascend"),
        packages_dir=str(packages),
        work_dir=str(tmp_path / "work"),
    )
    options = InstallOptions(
        packages_dir=str(packages),
        ascend_root=ctx.ascend_root,
        work_dir=ctx.work_dir,
        driver_version="25.3.rc1",
        firmware_version="7.8.0.2.212",
    )
    return ctx, options, events


def package_steps(options):
    host = {"arch": "aarch64", "chip": "910b", "pythons": {"3.11": sys.executable}}
    plan = plan_install(host, PROFILE, options)
    return [build_step(spec) for spec in plan if spec.kind in ("run_package", "reboot")]


async def test_package_steps_install_the_stack_and_stop_for_the_reboot_the_driver_asks_for(sim):
    ctx, options, events = sim
    steps = package_steps(options)
    assert [s.name for s in steps] == ["driver", "firmware", "reboot", "cann_toolkit", "ops", "nnal"]
    with pytest.raises(RebootRequired, match="reboot"):
        await run_steps(steps, ctx)
    assert ctx.state["reboot_required"] is True
    logged = [payload["line"] for kind, payload in events if kind == "log"]
    assert any("Reboot needed" in line for line in logged)


async def test_after_the_reboot_a_rerun_skips_what_is_done_and_finishes(sim, tmp_path):
    ctx, options, _ = sim
    steps = package_steps(options)
    with pytest.raises(RebootRequired):
        await run_steps(steps, ctx)
    # Pretend the host rebooted: the marker holds another boot's id.
    (tmp_path / "work" / "reboot-required").write_text("an-earlier-boot\n")
    outcome = await run_steps(package_steps(options), ctx)
    assert outcome == {
        "driver": SKIPPED,
        "firmware": SKIPPED,
        "reboot": SKIPPED,
        "cann_toolkit": DONE,
        "ops": DONE,
        "nnal": DONE,
    }
    again = await run_steps(package_steps(options), ctx)
    assert set(again.values()) == {SKIPPED}


async def test_the_reboot_step_waits_while_the_boot_that_asked_is_still_running(sim, tmp_path):
    ctx, _, _ = sim
    marker = tmp_path / "work" / "reboot-required"
    marker.parent.mkdir(parents=True)
    marker.write_text(Path(BOOT_ID).read_text())
    step = build_step(StepSpec("reboot", "Reboot", "reboot", {"marker": str(marker)}))
    with pytest.raises(RebootRequired):
        await run_step(step, ctx)
    assert marker.exists()


async def test_a_missing_package_fails_with_the_file_to_upload(sim, tmp_path):
    ctx, options, events = sim
    (tmp_path / "packages" / "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run").unlink()
    with pytest.raises(RebootRequired):
        await run_steps(package_steps(options), ctx)
    (tmp_path / "work" / "reboot-required").write_text("an-earlier-boot\n")
    with pytest.raises(StepFailed) as failure:
        await run_steps(package_steps(options), ctx)
    assert failure.value.step == "cann_toolkit"
    assert "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run" in failure.value.hint
    assert events[-1][1] | {"error": None, "hint": None} == {
        "step": "cann_toolkit",
        "title": "Install the CANN toolkit 8.3.RC2",
        "state": "failed",
        "error": None,
        "hint": None,
    }


async def test_an_installer_error_is_reported_with_its_output(sim):
    ctx, options, _ = sim
    toolkit = next(s for s in package_steps(options) if s.name == "cann_toolkit")
    with pytest.raises(StepFailed) as failure:
        await run_step(toolkit, ctx)  # no driver yet: the sim toolkit refuses
    assert "driver is not installed" in failure.value.output_tail


async def test_venv_and_stack_record_steps_work_and_are_idempotent(sim, tmp_path):
    ctx, _, _ = sim
    venv = str(tmp_path / "venv")
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    specs = [
        StepSpec("venv", "venv", "venv", {"python": sys.executable, "minor": minor, "venv": venv}),
        StepSpec(
            "pip_remove", "rm", "pip_uninstall", {"venv": venv, "packages": ["surely-not-installed-pkg"]}
        ),
        StepSpec(
            "record_stack",
            "record",
            "record_stack",
            {
                "path": f"{venv}/ascend-panel-stack.json",
                "venv": venv,
                "record": {"profile": "x", "set_env": []},
            },
        ),
    ]
    first = await run_steps([build_step(s) for s in specs], ctx)
    assert first == {"venv": DONE, "pip_remove": SKIPPED, "record_stack": DONE}
    assert '"profile": "x"' in (tmp_path / "venv" / "ascend-panel-stack.json").read_text()
    second = await run_steps([build_step(s) for s in specs], ctx)
    assert set(second.values()) == {SKIPPED}
