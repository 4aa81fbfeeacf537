"""The deployment page's History tab: every spec applied to it, numbered (panel/deployments/revisions.py),
with who, when, what changed, what it did and how it ended; operators go back to one from here (the Roll
back page, `?to_revision=N`, shows what that changes first)."""

from django.shortcuts import render
from django.utils.translation import pgettext_lazy
from django.views.decorators.http import require_safe

from panel.accounts.roles import OPERATOR, VIEWER, has_role
from panel.core.domain.choices import COLOUR_ALARM, COLOUR_OFFLINE, COLOUR_OK, COLOUR_RUNNING
from panel.core.views import role_required
from panel.deployments.models import Revision
from panel.deployments.pages.views import visible_deployment
from panel.deployments.revisions import history

CAUSES = {
    "create": pgettext_lazy("revision cause", "Created"),
    "apply": pgettext_lazy("revision cause", "Applied"),
    "edit": pgettext_lazy("revision cause", "Edited on its page"),
    "scale": pgettext_lazy("revision cause", "Scaled"),
    "rollback": pgettext_lazy("revision cause", "Rolled back"),
}
OUTCOME_COLOURS = {
    Revision.IN_PROGRESS: COLOUR_RUNNING,
    Revision.SUCCEEDED: COLOUR_OK,
    Revision.FAILED: COLOUR_ALARM,
    Revision.SUPERSEDED: COLOUR_OFFLINE,
}


@role_required(VIEWER)
@require_safe
def deployment_history(request, name):
    deployment = visible_deployment(request, name)
    primary = deployment.replica_of or deployment
    labels = dict(Revision.OUTCOMES)
    rows = [
        {
            **row,
            "outcome_label": labels[row["outcome"]],
            "colour": OUTCOME_COLOURS[row["outcome"]],
            "cause_label": CAUSES.get(row["cause"], row["cause"]),
        }
        for row in history(primary)
    ]
    newest = rows[0]["number"] if rows else None
    context = {
        "deployment": primary,
        "revisions": rows,
        "newest": newest,
        "can_operate": has_role(request.user, OPERATOR),
    }
    return render(request, "deployments/history.html", context)
