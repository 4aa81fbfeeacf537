"""`make run` demo only: fill the package store with simulated .run packages and stand-in wheels, so an
install on the sim hosts runs for real (python manage.py seed_sim_packages)."""

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from panel.provisioning.models import PackageFile
from panel.provisioning.store import add_local_file
from workers.ascend.compat import load_matrix
from workers.sim.installers import make_sim_package
from workers.sim.wheels import make_stack_wheels

# The chips of make run's sim hosts: sim-a2 (Atlas 800I A2, 910B3) and sim-duo (Atlas 300I Duo, 310P3).
# Driver, firmware and ops packages are per chip; toolkit, NNAL and wheels are not.
SIM_CHIPS = ("910b", "310p")
# Drivers the matrix's CANN releases accept: 25.5.1 for CANN 9.1.0 / 8.5.0 (newer than the sim's, so
# those installs show the driver, firmware and reboot steps; vllm-ascend 0.23.0's default graph mode needs
# 25.5.1 or newer: its profile's driver_min), 25.2.0 for CANN 8.2.RC1.
DEMO_DRIVERS = ("25.5.1", "25.2.0")
DEMO_FIRMWARE = "7.8.0.2.212"


def sim_files(out: Path) -> list[Path]:
    """Every package and wheel an install of any matrix profile needs on a sim host, for each sim chip the
    profile supports: preflight and install work for whichever profile the admin picks."""
    files = []
    for chip in SIM_CHIPS:
        files += [make_sim_package("driver", driver, out, chip=chip) for driver in DEMO_DRIVERS]
        files.append(make_sim_package("firmware", DEMO_FIRMWARE, out, chip=chip, hdk_version=DEMO_DRIVERS[0]))
    for profile in load_matrix():
        chips = [chip for chip in SIM_CHIPS if chip in profile.chips]
        if not chips:
            continue
        files += [make_sim_package(kind, profile.cann, out) for kind in ("toolkit", "nnal")]
        files += [make_sim_package("ops", profile.cann, out, chip=chip) for chip in chips]
        files += make_stack_wheels(profile, out / "wheels")
    return list(dict.fromkeys(files))


class Command(BaseCommand):
    help = "Seed the package store with simulated packages and wheels (demo mode only)."

    def handle(self, *args, **options):
        if settings.PANEL_MODE not in ("run", "test"):
            raise CommandError("seed_sim_packages is for `make run` and tests: simulated packages only.")
        known = set(PackageFile.objects.values_list("name", flat=True))
        already, added = len(known), 0
        with tempfile.TemporaryDirectory() as folder:
            for path in sim_files(Path(folder)):
                if path.name not in known:
                    add_local_file(path)
                    known.add(path.name)
                    added += 1
        self.stdout.write(f"package store: {added} simulated packages added, {already} already there")
