from django.core.management.base import BaseCommand

from panel.core.domain.choices import NodeTransport
from panel.nodes.models import Node


class Command(BaseCommand):
    help = "Make sure agent nodes with these names exist (the simulated hosts of `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+")

    def handle(self, *args, names, **options):
        for name in names:
            Node.objects.get_or_create(
                name=name,
                defaults={
                    "transport": NodeTransport.AGENT,
                    "address": "127.0.0.1",
                    "labels": {"simulated": "yes"},
                },
            )
