"""`GET|POST /api/v1/deployments/{id or name}/sleep/` and `POST …/wake/`: an `idle:` deployment's engine
put to sleep or woken by hand (operators), and its sleep state for anyone who sees it
(panel/deployments/sleeping.py; recorded as `sleep` / `wake` decisions with the person as actor)."""

from django.utils.translation import gettext_noop
from rest_framework import serializers

from panel.core.domain.choices import DecisionActor
from panel.deployments import reasons, sleeping
from panel.deployments.models import Deployment


class SleepBodySerializer(serializers.Serializer):
    level = serializers.ChoiceField(
        [1, 2], required=False, help_text="vLLM's sleep level; left out: the level of the deployment's idle:."
    )


class IdleSerializer(serializers.Serializer):
    sleep_after_s = serializers.IntegerField()
    level = serializers.IntegerField()


class SleepStateSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    sleep = serializers.ChoiceField(
        ["asleep", "awake"], allow_null=True, help_text="null: its engine cannot sleep (no idle: at launch)."
    )
    level = serializers.IntegerField(allow_null=True, help_text="The level it sleeps at.")
    last_wake = serializers.DateTimeField(allow_null=True, help_text="When it last woke.")
    idle = IdleSerializer(allow_null=True, help_text="Its idle: setting.")
    wake_s = serializers.FloatField(required=False, help_text="A wake by hand: how long it took.")


def state(deployment: Deployment) -> dict:
    return {"deployment": deployment.name, **sleeping.state_of(deployment)}


def sleep_by_hand(deployment: Deployment, data: dict, user) -> dict:
    """Raises DeploymentConflict (409) when it cannot sleep now or the engine refused."""
    why = [reasons.part(gettext_noop("Put to sleep by {user}"), user=user.get_username())]
    sleeping.sleep(deployment, level=data.get("level"), reason=why, actor=DecisionActor.USER, user=user)
    return state(deployment)


def wake_by_hand(deployment: Deployment, user) -> dict:
    why = [reasons.part(gettext_noop("Woken by {user}"), user=user.get_username())]
    took = sleeping.wake(deployment, reason=why, actor=DecisionActor.USER, user=user)
    return {**state(deployment), "wake_s": took}
