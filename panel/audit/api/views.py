from panel.accounts.roles import ADMIN
from panel.audit.api.serializers import AuditEntrySerializer
from panel.audit.filtersets import AuditEntryFilterSet
from panel.audit.models import AuditEntry
from panel.core.rest.api import ReadOnlyPanelViewSet


class AuditEntryViewSet(ReadOnlyPanelViewSet):
    """The audit log, newest first: sign-ins, token and role changes, nodes, deployments, installs,
    packages. Admins only; read-only (entries are written by the panel and pruned after the retention)."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    read_role = ADMIN
    write_role = ADMIN
