from django.shortcuts import render

from panel.accounts.roles import VIEWER
from panel.catalog.models import Model
from panel.core.views import role_required


@role_required(VIEWER)
def model_list(request):
    models = Model.objects.visible_to(request.user).prefetch_related("artifacts__node")
    return render(request, "catalog/list.html", {"models": models})
