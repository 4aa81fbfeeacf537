from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from panel.accounts.models import IdempotentAnswer
from panel.core.infra.panel_tasks import panel_task


@panel_task("panel.accounts.prune_idempotent_answers")
def prune_idempotent_answers() -> int:
    """Answers older than PANEL_IDEMPOTENCY_TTL_S are never replayed again."""
    cutoff = timezone.now() - timedelta(seconds=settings.PANEL_IDEMPOTENCY_TTL_S)
    deleted, _ = IdempotentAnswer.objects.filter(created__lt=cutoff).delete()
    return deleted
