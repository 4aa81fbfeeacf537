"""Write agents' credentials to files, for agents started on the panel's own machine (`make run`'s sim hosts
and central agent, the browser tier, benches) or to hand one to a host by hand; --rotate issues new node
credentials first. --broker also writes DIR/<name>.broker: the broker URL that agent uses, on RabbitMQ with
its own user (created, or given a new password, here), never the panel's, and DIR/broker-ca.pem, the broker's
CA (PANEL_BROKER_CA_FILE) that agent pins for amqps:// (ASCEND_PANEL_BROKER_CA_FILE), as a join answer
carries it; without a CA an earlier one there is removed, so an agent is never left pinning a CA the broker
no longer uses.

--central writes DIR/central.key, the central agent's key: derived one way from the panel's key material
(workers.identity.central_key), so the central agent needs none of that material and nothing of the panel's
can be derived from it. It changes only when the key material does.
"""

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from panel.nodes.agents import broker_admin
from panel.nodes.agents.join import agent_broker_url, public_broker_url
from panel.nodes.agents.trust import agent_key, panel_central_key
from panel.nodes.models import Node, new_credential_id

BROKER_CA_FILE = "broker-ca.pem"  # the name the install script gives it on a host


class Command(BaseCommand):
    help = "Write each named node's agent credential (or the central agent's) to DIR/<name>.key (mode 600)."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*")
        parser.add_argument("--dir", required=True, help="folder for the <name>.key files")
        parser.add_argument("--central", action="store_true", help="also write the central agent's key")
        parser.add_argument("--rotate", action="store_true", help="issue new node credentials first")
        parser.add_argument(
            "--broker", action="store_true", help="also write DIR/<name>.broker, the agent's own broker URL"
        )

    def handle(self, *args, names, dir, central, rotate, broker, **options):
        if not names and not central:
            raise CommandError("name the nodes whose credentials to write, or give --central")
        folder = Path(dir)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if broker:
            self._write_broker_ca(folder)
        for name in names:
            node = Node.objects.filter(name=name).first()
            if node is None:
                raise CommandError(f"no node named {name!r}: add it first (Nodes → Add node)")
            if rotate:
                node.credential_id = new_credential_id()
                node.save(update_fields=["credential_id", "updated"])
            self.stdout.write(str(write_private(folder / f"{name}.key", agent_key(node))))
            if broker:
                password = _provisioned(broker_admin.provision_node, name)
                url = agent_broker_url("", name, password)
                self.stdout.write(str(write_private(folder / f"{name}.broker", url.encode())))
        if central:
            self.stdout.write(str(write_private(folder / "central.key", panel_central_key())))
            if broker:
                url = public_broker_url("")
                password = _provisioned(broker_admin.provision_central)
                if password:
                    url = broker_admin.user_broker_url(url, broker_admin.central_user(), password)
                self.stdout.write(str(write_private(folder / "central.broker", url.encode())))

    def _write_broker_ca(self, folder: Path) -> None:
        path = folder / BROKER_CA_FILE
        ca_pem = broker_admin.broker_ca_pem() if broker_admin.fleet_broker() else ""
        if ca_pem:
            path.write_text(ca_pem, encoding="ascii")  # a certificate: public, unlike the files beside it
            self.stdout.write(str(path))
        else:
            path.unlink(missing_ok=True)


def _provisioned(provision, *args) -> str:
    """The new broker user's password, or "" on make run's Redis (no users there)."""
    if not broker_admin.fleet_broker():
        return ""
    try:
        return provision(*args)
    except broker_admin.BrokerAdminError as error:
        raise CommandError(str(error)) from None


def write_private(path: Path, content: bytes) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return path
