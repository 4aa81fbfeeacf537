"""Write agent nodes' credentials to files, for agents started on the panel's own machine (`make run`'s sim
hosts, the browser tier, benches) or to hand one to a host by hand; --rotate issues new ones first."""

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from panel.nodes.models import Node, new_credential_id
from panel.nodes.trust import agent_key


class Command(BaseCommand):
    help = "Write each named node's agent credential to DIR/<node>.key (mode 600)."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+")
        parser.add_argument("--dir", required=True, help="folder for the <node>.key files")
        parser.add_argument("--rotate", action="store_true", help="issue new credentials first")

    def handle(self, *args, names, dir, rotate, **options):
        folder = Path(dir)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in names:
            node = Node.objects.filter(name=name).first()
            if node is None:
                raise CommandError(f"no node named {name!r}: add it first (Nodes → Add node)")
            if rotate:
                node.credential_id = new_credential_id()
                node.save(update_fields=["credential_id", "updated"])
            path = folder / f"{name}.key"
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(agent_key(node))
            self.stdout.write(str(path))
