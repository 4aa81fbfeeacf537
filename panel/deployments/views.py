from django.shortcuts import render

from panel.accounts.roles import VIEWER
from panel.core.views import role_required
from panel.deployments.models import Deployment


@role_required(VIEWER)
def deployment_list(request):
    deployments = (
        Deployment.objects.visible_to(request.user).select_related("model").prefetch_related("nodes")
    )
    return render(request, "deployments/list.html", {"deployments": deployments})
