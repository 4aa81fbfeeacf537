"""The node page's Images section: pull, load from the package store, remove, list again (each an
operation; the browser goes to its page to watch the progress)."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from panel.accounts.roles import OPERATOR
from panel.core.views import role_required
from panel.deployments.launch import images
from panel.deployments.launch.containers import containers_of
from panel.nodes.models import Node
from panel.provisioning.models import PackageFile, PackageKind


def images_context(node) -> dict:
    """What the node page shows of its container engines and images, and the archives it can load."""
    facts = containers_of(node)
    return {
        "engine": facts.get("engine"),
        "engines": facts.get("engines") or [],
        "ascend_docker_runtime": facts.get("ascend_docker_runtime") or {},
        "images": images.image_rows(node),
        "archives": PackageFile.objects.installable().filter(kind=PackageKind.IMAGE).order_by("name"),
    }


@role_required(OPERATOR)
@require_POST
def node_images(request, name):
    node = get_object_or_404(Node.objects.visible_to(request.user), name=name)
    action, image = request.POST.get("action", ""), request.POST.get("image", "").strip()
    try:
        if action == "pull":
            operation = images.start_pull(node, image, user=request.user)
        elif action == "remove":
            operation = images.start_remove(node, image, user=request.user)
        elif action == "load":
            package = get_object_or_404(PackageFile, pk=request.POST.get("package") or 0)
            panel_url = request.build_absolute_uri("/").rstrip("/")
            operation = images.start_load(node, package, panel_url=panel_url, user=request.user)
        else:
            operation = images.start_list(node, user=request.user)
    except (images.ImageRefused, ValidationError) as error:
        messages.error(request, " ".join(getattr(error, "messages", [str(error)])))
        return redirect("nodes:detail", name=node.name)
    return redirect("operations:detail", pk=operation.pk)
