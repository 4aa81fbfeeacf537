from django.conf import settings
from django.core.management.base import BaseCommand

from panel.accounts.bootstrap import ensure_admin, ensure_role_groups


class Command(BaseCommand):
    help = "Create the role groups and, on first run, the `admin` user (PANEL_ADMIN_PASSWORD or generated)."

    def handle(self, *args, **options):
        ensure_role_groups()
        generated = ensure_admin(settings.PANEL_ADMIN_PASSWORD)
        if generated:
            self.stdout.write(
                f"Created user admin with password: {generated}  (shown once; change it after login)"
            )
