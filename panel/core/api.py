"""The base viewsets every app's API extends: querysets narrowed to what the user may see."""

from rest_framework import mixins, viewsets


class PanelViewSet(viewsets.GenericViewSet):
    """Querysets are always narrowed to what the user may see (one permission rule for every endpoint)."""

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class ReadOnlyPanelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    pass
