"""The deployment page's Sleep card (issue 36 item 2): asleep or awake, at which level, when it last woke,
its idle: setting, and Sleep / Wake buttons for operators. The page renders it once
(`{% sleep_box deployment %}`); static/js/sleep_box.js fetches it again (deployment_sleep_box) when a
decision of the deployment is recorded or settled, which every sleep and wake is."""

from datetime import datetime

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import OPERATOR, VIEWER, has_role
from panel.core.domain.choices import DecisionActor
from panel.core.views import role_required
from panel.deployments import reasons, sleeping
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.models import Deployment
from panel.deployments.pages.views import visible_deployment


def sleep_card(deployment: Deployment, user=None) -> dict:
    """The card's context; `shown` False for a deployment that was not launched able to sleep."""
    primary = deployment.replica_of or deployment
    state = sleeping.state_of(deployment)
    return {
        "sleep_shown": state["sleep"] is not None,
        "sleep_name": deployment.name,
        "sleep_primary": primary.name,
        "sleep_state": state["sleep"],
        "sleep_level": state["level"],
        "sleep_last_wake": datetime.fromisoformat(state["last_wake"]) if state["last_wake"] else None,
        "sleep_idle": state["idle"],
        "sleep_can_operate": user is not None and has_role(user, OPERATOR),
    }


@role_required(VIEWER)
@require_safe
def deployment_sleep_box(request, name):
    deployment = visible_deployment(request, name)
    return render(request, "deployments/sleep_box.html", sleep_card(deployment, request.user))


@role_required(OPERATOR)
@require_POST
def deployment_sleep(request, name):
    deployment = visible_deployment(request, name)
    why = [reasons.part(gettext_noop("Put to sleep by {user}"), user=request.user.get_username())]
    try:
        if sleeping.sleep(deployment, reason=why, actor=DecisionActor.USER, user=request.user):
            messages.success(request, _("{name} sleeps.").format(name=deployment.name))
        else:
            messages.error(request, _("{name} did not go to sleep; its Decisions say why.").format(name=name))
    except DeploymentConflict as error:
        messages.error(request, str(error))
    return redirect("deployments:detail", name=name)


@role_required(OPERATOR)
@require_POST
def deployment_wake(request, name):
    deployment = visible_deployment(request, name)
    why = [reasons.part(gettext_noop("Woken by {user}"), user=request.user.get_username())]
    try:
        took = sleeping.wake(deployment, reason=why, actor=DecisionActor.USER, user=request.user)
        messages.success(request, _("{name} woke in {seconds} s.").format(name=name, seconds=f"{took:.1f}"))
    except DeploymentConflict as error:
        messages.error(request, str(error))
    return redirect("deployments:detail", name=name)
