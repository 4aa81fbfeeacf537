"""Which groups a user may join. Each group name maps to an object the user must be able to see."""

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


def may_join(user, group: str) -> bool:
    """Permission check for one group (runs in a thread: it queries the database)."""
    if role_of(user) is None or must_change_password(user):
        return False
    if group in (FLEET, ALERTS):
        return True
    match = GROUP_PATTERN.match(group)
    if not match:
        return False
    kind, key = match.groups()
    if kind == "operation":
        try:
            operation_id = uuid.UUID(key)
        except ValueError:
            return False
        return Operation.objects.visible_to(user).filter(pk=operation_id).exists()
    if kind == "node":
        return Node.objects.visible_to(user).filter(name=key).exists()
    return Deployment.objects.visible_to(user).filter(name=key).exists()
