"""Which groups a user may join. Each group name maps to an object the user must be able to see.

A dashboard subscribes to the fleet summary and the nodes on its page (up to 50 node groups at once):
`joinable` checks a whole subscription with one query per kind of object rather than one per group, and
with the same `visible_to` rule as the pages and the API."""

import re
import uuid

from panel.accounts.roles import role_of
from panel.accounts.temporary import must_change_password
from panel.deployments.models import Deployment
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.realtime.broadcast import ALERTS, FLEET

GROUP_PATTERN = re.compile(r"^(operation|node|deployment)\.([A-Za-z0-9_.:-]{1,100})$")
MAX_GROUPS = 200


def joinable(user, groups) -> set[str]:
    """The groups of `groups` the user may join (runs in a thread: one query per kind of object asked for,
    whatever the number of groups)."""
    if role_of(user) is None or must_change_password(user):
        return set()
    allowed = {group for group in groups if group in (FLEET, ALERTS)}
    wanted: dict[str, dict[str, str]] = {"operation": {}, "node": {}, "deployment": {}}
    for group in groups:
        match = GROUP_PATTERN.match(group)
        if match:
            kind, key = match.groups()
            wanted[kind][key] = group
    operations: dict[uuid.UUID, set[str]] = {}  # one id may be spelt several ways
    for key, group in wanted["operation"].items():
        try:
            operations.setdefault(uuid.UUID(key), set()).add(group)
        except ValueError:
            continue
    if operations:
        seen = Operation.objects.visible_to(user).filter(pk__in=operations).values_list("pk", flat=True)
        allowed.update(*(operations[pk] for pk in seen))
    for kind, model in (("node", Node), ("deployment", Deployment)):
        if wanted[kind]:
            visible = model.objects.visible_to(user).filter(name__in=wanted[kind])
            allowed |= {wanted[kind][name] for name in visible.values_list("name", flat=True)}
    return allowed
