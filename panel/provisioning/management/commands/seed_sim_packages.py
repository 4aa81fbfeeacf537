"""`make run` demo only: fill the package store with simulated .run packages and stand-in wheels, so an
install on the sim hosts runs for real (python manage.py seed_sim_packages)."""

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from panel.provisioning.models import PackageFile
from panel.provisioning.store import add_local_file
from workers.ascend.compat import profile_for
from workers.sim.installers import make_sim_package
from workers.sim.wheels import make_stack_wheels

# Two demo profiles: 0.11.0 keeps the sim's driver; 0.13.0 (CANN 8.5.0) needs a newer driver, so its
# install shows the driver, firmware and reboot steps.
DEMO_PROFILES = ("0.11.0", "0.13.0")
DEMO_DRIVER = "25.3.rc1"
DEMO_FIRMWARE = "7.8.0.2.212"


def sim_files(out: Path) -> list[Path]:
    files = [
        make_sim_package("driver", DEMO_DRIVER, out),
        make_sim_package("firmware", DEMO_FIRMWARE, out, hdk_version=DEMO_DRIVER),
    ]
    for key in DEMO_PROFILES:
        profile = profile_for(key)
        files += [make_sim_package(kind, profile.cann, out) for kind in ("toolkit", "ops", "nnal")]
        files += make_stack_wheels(profile, out / "wheels")
    return files


class Command(BaseCommand):
    help = "Seed the package store with simulated packages and wheels (demo mode only)."

    def handle(self, *args, **options):
        if settings.PANEL_MODE not in ("run", "test"):
            raise CommandError("seed_sim_packages is for `make run` and tests: simulated packages only.")
        known = set(PackageFile.objects.values_list("name", flat=True))
        added = 0
        with tempfile.TemporaryDirectory() as folder:
            for path in sim_files(Path(folder)):
                if path.name not in known:
                    add_local_file(path)
                    added += 1
        self.stdout.write(f"package store: {added} simulated packages added, {len(known)} already there")
