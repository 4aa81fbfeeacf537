"""Write agent nodes' credentials to files, for agents started on the panel's own machine (`make run`'s sim
hosts, the browser tier, benches) or to hand one to a host by hand; --rotate issues new ones first.
--broker also writes DIR/<node>.broker: the broker URL that node's agent uses, on RabbitMQ with the node's
own user (created, or given a new password, here), never the panel's."""

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from panel.nodes import broker_admin
from panel.nodes.join import agent_broker_url
from panel.nodes.models import Node, new_credential_id
from panel.nodes.trust import agent_key


class Command(BaseCommand):
    help = "Write each named node's agent credential to DIR/<node>.key (mode 600)."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+")
        parser.add_argument("--dir", required=True, help="folder for the <node>.key files")
        parser.add_argument("--rotate", action="store_true", help="issue new credentials first")
        parser.add_argument(
            "--broker", action="store_true", help="also write DIR/<node>.broker, the node's own broker URL"
        )

    def handle(self, *args, names, dir, rotate, broker, **options):
        folder = Path(dir)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in names:
            node = Node.objects.filter(name=name).first()
            if node is None:
                raise CommandError(f"no node named {name!r}: add it first (Nodes → Add node)")
            if rotate:
                node.credential_id = new_credential_id()
                node.save(update_fields=["credential_id", "updated"])
            self.stdout.write(str(write_private(folder / f"{name}.key", agent_key(node))))
            if broker:
                try:
                    password = broker_admin.provision_node(name) if broker_admin.fleet_broker() else ""
                except broker_admin.BrokerAdminError as error:
                    raise CommandError(str(error)) from None
                url = agent_broker_url("", name, password)
                self.stdout.write(str(write_private(folder / f"{name}.broker", url.encode())))


def write_private(path: Path, content: bytes) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return path
