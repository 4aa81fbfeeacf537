from django.core.management.base import BaseCommand

from panel.catalog.services import load_starter_catalog


class Command(BaseCommand):
    help = "Create or refresh the starter catalog's models (workers/models/catalog.yaml); safe to run again."

    def handle(self, *args, **options):
        created, updated = load_starter_catalog()
        self.stdout.write(f"starter catalog: {created} models added, {updated} refreshed")
