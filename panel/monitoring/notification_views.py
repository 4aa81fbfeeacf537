"""The notifications page (admins): channels with their Test button and recent deliveries, routes and
silences. The API under /api/v1/ (panel.monitoring.api.notifications) does the same for scripts."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import ADMIN
from panel.core.views import role_required
from panel.monitoring.forms import ChannelForm, RouteForm, SilenceForm
from panel.monitoring.models import Delivery, DeliveryStatus, NotificationChannel, Route, Silence
from panel.monitoring.notifications import notify

RECENT_DELIVERIES = 30
PAGE = "monitoring:notifications"


def _page(request, **forms):
    now = timezone.now()
    context = {
        "channels": NotificationChannel.objects.visible_to(request.user),
        "routes": Route.objects.visible_to(request.user).select_related("channel"),
        "silences": Silence.objects.visible_to(request.user)
        .filter(ends_at__gt=now)
        .select_related("created_by"),
        "deliveries": Delivery.objects.visible_to(request.user).select_related("channel", "alert")[
            :RECENT_DELIVERIES
        ],
        "channel_form": forms.get("channel_form") or ChannelForm(),
        "route_form": forms.get("route_form") or RouteForm(),
        "silence_form": forms.get("silence_form") or SilenceForm(),
    }
    return render(request, "monitoring/notifications.html", context, status=400 if forms else 200)


@role_required(ADMIN)
@require_safe
def notifications(request):
    return _page(request)


@require_POST
@role_required(ADMIN)
def add_channel(request):
    form = ChannelForm(request.POST)
    if not form.is_valid():
        return _page(request, channel_form=form)
    channel = form.save()
    messages.success(request, _("Channel %(name)s added.") % {"name": channel.name})
    return redirect(PAGE)


@require_POST
@role_required(ADMIN)
def test_channel(request, pk):
    channel = get_object_or_404(NotificationChannel.objects.visible_to(request.user), pk=pk)
    delivery = notify.send_test(channel)
    if delivery.status == DeliveryStatus.SENT:
        messages.success(request, _("Test notification sent to %(name)s.") % {"name": channel.name})
    else:
        messages.error(
            request,
            _("Test notification to %(name)s failed: %(error)s")
            % {"name": channel.name, "error": delivery.error},
        )
    return redirect(PAGE)


@require_POST
@role_required(ADMIN)
def add_route(request):
    form = RouteForm(request.POST)
    if not form.is_valid():
        return _page(request, route_form=form)
    form.save()
    messages.success(request, _("Route added."))
    return redirect(PAGE)


DELETED = {NotificationChannel: gettext_lazy("Channel deleted."), Route: gettext_lazy("Route deleted.")}


@require_POST
@role_required(ADMIN)
def delete(request, pk, model: type[NotificationChannel] | type[Route]):
    """Delete a channel or a route: the URL says which (`model`)."""
    get_object_or_404(model.objects.visible_to(request.user), pk=pk).delete()
    messages.success(request, DELETED[model])
    return redirect(PAGE)


@require_POST
@role_required(ADMIN)
def add_silence(request):
    form = SilenceForm(request.POST)
    if not form.is_valid():
        return _page(request, silence_form=form)
    silence = form.save(commit=False)
    silence.starts_at, silence.created_by = timezone.now(), request.user
    silence.save()
    messages.success(request, _("Silence set."))
    return redirect(PAGE)


@require_POST
@role_required(ADMIN)
def end_silence(request, pk):
    """End it now: held sends go out at their next look (within a few minutes)."""
    now = timezone.now()
    Silence.objects.visible_to(request.user).filter(pk=pk, ends_at__gt=now).update(ends_at=now)
    messages.success(request, _("Silence ended."))
    return redirect(PAGE)
