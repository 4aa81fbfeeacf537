"""`GET /api/v1/deployments/{id or name}/events/`: the deployment's recorded decisions (docs/serving-plane.md
§2), newest first, a page at a time, with each reason in the request's language beside its parts."""

from rest_framework import serializers
from rest_framework.request import Request

from panel.core.domain.choices import DecisionActor, DecisionKind, DecisionOutcome
from panel.core.domain.translated import in_language
from panel.core.rest.pagination import StandardPagination
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment

ROLES = ["", "prefill", "decode"]


class EventQuerySerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        DecisionKind.values, required=False, help_text="Only decisions of this kind."
    )
    role = serializers.ChoiceField(
        ROLES, required=False, allow_blank=True, help_text="Only decisions about this role (empty: plain)."
    )
    page = serializers.IntegerField(required=False, min_value=1, help_text="A page number (the first is 1).")
    page_size = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text=f"Results per page (default 50); above {StandardPagination.max_page_size}, that many.",
    )


class ReasonPartSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, help_text="An English template with `{name}` fields.")
    params = serializers.DictField(help_text="The values that fill it.")


class EventSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    time = serializers.DateTimeField(help_text="When it was decided.")
    kind = serializers.ChoiceField(DecisionKind.choices)
    kind_display = serializers.CharField(help_text="`kind` in the request's language.")
    role = serializers.ChoiceField(ROLES, allow_blank=True, help_text="The role it concerns; empty: plain.")
    replica = serializers.CharField(allow_blank=True, help_text="The replica it concerns, if one.")
    actor = serializers.ChoiceField(DecisionActor.choices, help_text="Who decided.")
    user = serializers.CharField(allow_blank=True, help_text="The person, when the actor is a user.")
    figures = serializers.DictField(
        child=serializers.FloatField(), help_text="The numbers it was decided on, by name."
    )
    reason = serializers.CharField(allow_blank=True, help_text="Why, in English.")
    reason_display = serializers.CharField(allow_blank=True, help_text="`reason` in the request's language.")
    reason_parts = ReasonPartSerializer(many=True, help_text="`reason` as a template and values per part.")
    outcome = serializers.ChoiceField(DecisionOutcome.choices)
    outcome_display = serializers.CharField(help_text="`outcome` in the request's language.")
    outcome_reason = serializers.CharField(allow_blank=True, help_text="Why it failed, or what it did.")
    outcome_reason_display = serializers.CharField(allow_blank=True)
    outcome_parts = ReasonPartSerializer(many=True)
    settled = serializers.DateTimeField(allow_null=True, help_text="When its outcome was known.")


class EventPageSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = EventSerializer(many=True)


def event_data(decision: Decision) -> dict:
    """One decision as the API answers it, its texts in the active language."""
    return {
        "id": decision.pk,
        "time": decision.time,
        "kind": decision.kind,
        "kind_display": decision.get_kind_display(),
        "role": decision.role,
        "replica": decision.replica,
        "actor": decision.actor,
        "user": decision.username,
        "figures": decision.figures,
        "reason": decision.reason,
        "reason_display": in_language(decision.reason_parts),
        "reason_parts": decision.reason_parts,
        "outcome": decision.outcome,
        "outcome_display": str(DecisionOutcome(decision.outcome).label),
        "outcome_reason": decision.outcome_text,
        "outcome_reason_display": in_language(decision.outcome_parts),
        "outcome_parts": decision.outcome_parts,
        "settled": decision.settled,
    }


def events_page(request: Request, view, deployment: Deployment) -> dict:
    """The page of the deployment's decisions the request asks for (a replica's are its primary's)."""
    query = EventQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    primary = deployment.replica_of or deployment
    decisions = Decision.objects.filter(deployment=primary).order_by("-time", "-id")
    if "kind" in query.validated_data:
        decisions = decisions.filter(kind=query.validated_data["kind"])
    if "role" in query.validated_data:
        decisions = decisions.filter(role=query.validated_data["role"])
    paginator = StandardPagination()
    page = paginator.paginate_queryset(decisions, request, view=view)
    return {
        "deployment": primary.name,
        "count": paginator.page.paginator.count,
        "next": paginator.get_next_link(),
        "previous": paginator.get_previous_link(),
        "results": [event_data(decision) for decision in page],
    }
