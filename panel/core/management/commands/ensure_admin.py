from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from panel.accounts.bootstrap import WeakAdminPassword, ensure_admin, ensure_role_groups


class Command(BaseCommand):
    help = "Create the role groups and, on first run, the `admin` user (PANEL_ADMIN_PASSWORD or generated)."

    def handle(self, *args, **options):
        ensure_role_groups()
        try:
            generated = ensure_admin(settings.PANEL_ADMIN_PASSWORD)
        except WeakAdminPassword as error:
            raise CommandError(str(error)) from None
        if generated:
            self.stdout.write(
                f"Created user admin with password: {generated}  (shown once; change it after login)"
            )
