import posixpath

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from panel.catalog.demo import DEMO_MODEL_NAME, ensure_demo_model, wait_until_ready


class Command(BaseCommand):
    help = (
        "Register the tiny chat model the simulated hosts of `make run` generate (python -m workers.sim "
        "create --tiny-chat-model) with a copy on each named node; safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("nodes", nargs="+", help="node names, e.g. sim-a2 sim-duo")
        parser.add_argument("--name", default=DEMO_MODEL_NAME)
        parser.add_argument(
            "--path", default="", help="the folder on the nodes (default: tiny-chat in PANEL_MODELS_ROOT)"
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=0,
            metavar="SECONDS",
            help="then wait up to SECONDS for the nodes to be online and their copies inspected",
        )

    def handle(self, *args, nodes, name, path, wait, **options):
        path = path or posixpath.join(settings.PANEL_MODELS_ROOT, "tiny-chat")
        try:
            started = ensure_demo_model(nodes, path, name)
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"demo model {name}: {len(started)} inspections started ({', '.join(nodes)}: {path})"
        )
        if wait > 0:
            waiting = wait_until_ready(nodes, path, wait)
            if waiting:
                self.stderr.write(f"not ready after {wait:.0f} s: {', '.join(waiting)}")
