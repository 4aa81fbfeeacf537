"""Choice sets with named constants and the status colour each one shows as (one meaning everywhere)."""

from typing import ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

# Colour classes used by templates: ok (green), warning (amber), alarm (red), offline (grey), running (blue).
COLOUR_OK = "ok"
COLOUR_WARNING = "warning"
COLOUR_ALARM = "alarm"
COLOUR_OFFLINE = "offline"
COLOUR_RUNNING = "running"


class ColouredChoices(models.TextChoices):
    # Set after each class (a value in the body would be an enum member): value -> colour class.
    COLOURS: ClassVar[dict[str, str]]

    @classmethod
    def colour(cls, value) -> str:
        return cls.COLOURS.get(value, COLOUR_OFFLINE)


class NodeStatus(ColouredChoices):
    ONLINE = "online", _("Online")
    OFFLINE = "offline", _("Offline")
    UNKNOWN = "unknown", _("Unknown")


NodeStatus.COLOURS = {"online": COLOUR_OK, "offline": COLOUR_OFFLINE, "unknown": COLOUR_OFFLINE}


class NodeTransport(models.TextChoices):
    AGENT = "agent", _("Agent")
    SSH = "ssh", _("SSH")


class NpuHealth(ColouredChoices):
    OK = "OK", _("OK")
    WARNING = "Warning", _("Warning")
    ALARM = "Alarm", _("Alarm")
    CRITICAL = "Critical", _("Critical")
    UNKNOWN = "Unknown", _("Unknown")


NpuHealth.COLOURS = {
    "OK": COLOUR_OK,
    "Warning": COLOUR_WARNING,
    "Alarm": COLOUR_ALARM,
    "Critical": COLOUR_ALARM,
}


class NpuHealthState(ColouredChoices):
    """What the panel makes of an NPU's health signals (docs/npu-health.md), not the raw npu-smi word:
    `suspect` is watched, `failed` is out of service (nothing is placed on it). Changed only by the policy
    (panel.nodes.health.npu_health) or by an admin."""

    OK = "ok", pgettext_lazy("npu health state", "In service")
    SUSPECT = "suspect", pgettext_lazy("npu health state", "Suspect")
    FAILED = "failed", pgettext_lazy("npu health state", "Failed")


NpuHealthState.COLOURS = {"ok": COLOUR_OK, "suspect": COLOUR_WARNING, "failed": COLOUR_ALARM}


class OperationStatus(ColouredChoices):
    TERMINAL: ClassVar[frozenset[str]]
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


OperationStatus.COLOURS = {
    "pending": COLOUR_OFFLINE,
    "running": COLOUR_RUNNING,
    "succeeded": COLOUR_OK,
    "failed": COLOUR_ALARM,
    "cancelled": COLOUR_WARNING,
}
OperationStatus.TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class OperationKind(models.TextChoices):
    INVENTORY = "inventory", _("Inventory")
    PREFLIGHT = "preflight", _("Preflight")
    INSTALL = "install", _("Install")
    DOWNLOAD = "download", _("Model download")
    CONVERT = "convert", _("Model conversion")
    INSPECT_MODEL = "model_inspect", _("Model inspection")
    # "Model copy" is also what a copy of a model (an artifact) is called: the context tells the two apart.
    COPY_MODEL = "model_copy", pgettext_lazy("operation kind", "Model copy")
    DELETE_MODEL = "model_delete", _("Model deletion")
    ATC = "model_atc", _("ATC conversion")
    DEPLOY = "deploy", _("Deploy")
    STOP = "stop", _("Stop deployment")
    BENCHMARK = "benchmark", _("Benchmark")
    FABRIC_CHECK = "fabric_check", _("NPU network check")
    DIAGNOSTICS = "diagnostics", _("Diagnostics collection")
    IMAGE_LIST = "image_list", _("Image list")
    IMAGE_PULL = "image_pull", _("Image pull")
    IMAGE_LOAD = "image_load", _("Image load")
    IMAGE_REMOVE = "image_remove", _("Image removal")


# The operations on a model's files: their end updates the catalog, and the model page lists them.
MODEL_OPERATION_KINDS = (
    OperationKind.INSPECT_MODEL,
    OperationKind.DOWNLOAD,
    OperationKind.CONVERT,
    OperationKind.ATC,
    OperationKind.COPY_MODEL,
    OperationKind.DELETE_MODEL,
)


class DeploymentState(ColouredChoices):
    SETTLED: ClassVar[frozenset[str]]
    PENDING = "pending", _("Pending")
    STARTING = "starting", _("Starting")
    RUNNING = "running", _("Running")
    UNHEALTHY = "unhealthy", _("Unhealthy")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    FAILED = "failed", _("Failed")


DeploymentState.COLOURS = {
    "pending": COLOUR_OFFLINE,
    "starting": COLOUR_RUNNING,
    "running": COLOUR_OK,
    "unhealthy": COLOUR_WARNING,
    "stopping": COLOUR_RUNNING,
    "stopped": COLOUR_OFFLINE,
    "failed": COLOUR_ALARM,
}


# The states a deployment rests in: no start, stop or restart is under way (a page drops its "starting…").
DeploymentState.SETTLED = frozenset({"running", "stopped", "failed", "unhealthy"})


class StepState(ColouredChoices):
    """An install step's state as its agent reports it (workers.steps.base)."""

    CHECKING = "checking", _("checking")
    SKIPPED = "skipped", _("already done")
    RUNNING = "running", _("running")
    VERIFYING = "verifying", _("verifying")
    DONE = "done", _("done")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


StepState.COLOURS = {
    "checking": COLOUR_RUNNING,
    "running": COLOUR_RUNNING,
    "verifying": COLOUR_RUNNING,
    "skipped": COLOUR_OFFLINE,
    "done": COLOUR_OK,
    "failed": COLOUR_ALARM,
    "cancelled": COLOUR_WARNING,
}


class DecisionKind(ColouredChoices):
    """What a recorded serving decision was (docs/serving-plane.md §2, panel/deployments/decisions.py)."""

    SCALE_UP = "scale_up", _("Scale up")
    SCALE_DOWN = "scale_down", _("Scale down")
    SCALE_REFUSED = "scale_refused", _("Scale refused")
    SLEEP = "sleep", pgettext_lazy("decision", "Sleep")
    WAKE = "wake", pgettext_lazy("decision", "Wake")
    WAKE_FAILED = "wake_failed", _("Wake failed")
    NPU_SUSPECT = "npu_suspect", _("NPU suspect")
    NPU_FAILED = "npu_failed", _("NPU failed")
    NPU_RECOVERED = "npu_recovered", _("NPU recovered")
    REPLICA_MOVED = "replica_moved", _("Replica moved")
    REQUEST_RETRIED = "request_retried", _("Request retried")
    ENGINE_FENCED = "engine_fenced", _("Old engine stopped")
    ROLLOUT = "rollout", pgettext_lazy("decision", "Rollout")
    REVISION = "revision", pgettext_lazy("decision", "Revision")
    RESTART = "restart", pgettext_lazy("decision", "Restart")
    GAVE_UP = "gave_up", _("Gave up")
    START = "start", pgettext_lazy("decision", "Start")
    STOP = "stop", pgettext_lazy("decision", "Stop")


DecisionKind.COLOURS = {
    "scale_up": COLOUR_RUNNING,
    "scale_down": COLOUR_RUNNING,
    "scale_refused": COLOUR_WARNING,
    "sleep": COLOUR_OFFLINE,
    "wake": COLOUR_OK,
    "wake_failed": COLOUR_ALARM,
    "npu_suspect": COLOUR_WARNING,
    "npu_failed": COLOUR_ALARM,
    "npu_recovered": COLOUR_OK,
    "replica_moved": COLOUR_WARNING,
    "request_retried": COLOUR_WARNING,
    "engine_fenced": COLOUR_WARNING,
    "rollout": COLOUR_RUNNING,
    "revision": COLOUR_RUNNING,
    "restart": COLOUR_WARNING,
    "gave_up": COLOUR_ALARM,
    "start": COLOUR_OK,
    "stop": COLOUR_OFFLINE,
}


class DecisionOutcome(ColouredChoices):
    PENDING = "pending", pgettext_lazy("decision outcome", "Pending")
    DONE = "done", pgettext_lazy("decision outcome", "Done")
    FAILED = "failed", pgettext_lazy("decision outcome", "Failed")


DecisionOutcome.COLOURS = {"pending": COLOUR_RUNNING, "done": COLOUR_OK, "failed": COLOUR_ALARM}


class DecisionActor(models.TextChoices):
    """Who took a decision: the reconcile tick on the beat leader, the gateway per request, or a person."""

    LEADER = "leader", _("Leader")
    GATEWAY = "gateway", _("Gateway")
    USER = "user", pgettext_lazy("decision actor", "User")


def for_browser() -> dict:
    """What the pages' scripts know of statuses, from here only (templates/base.html writes it into every
    page, static/js/choices.js reads it): per choice set its colours, its labels in the active language, and
    the set that ends or settles it; `fallback` is the colour of a value no set names."""

    def described(choices, **sets) -> dict:
        return {
            "colours": dict(choices.COLOURS),
            "labels": {value: str(label) for value, label in choices.choices},
            **{name: sorted(members) for name, members in sets.items()},
        }

    return {
        "fallback": COLOUR_OFFLINE,
        "operation": described(OperationStatus, ended=OperationStatus.TERMINAL),
        "deployment": described(DeploymentState, settled=DeploymentState.SETTLED),
        "node": described(NodeStatus),
        "npu_health": described(NpuHealth),
        "npu_health_state": described(NpuHealthState),
        "step": described(StepState),
        "decision": described(DecisionKind),
        "decision_outcome": described(DecisionOutcome),
    }


class DeploymentRole(models.TextChoices):
    """A deployment row's part in its topology (docs/serving-plane.md §1): plain replicas, or the prefill and
    decode pools of a disaggregated deployment."""

    PLAIN = "", pgettext_lazy("deployment role", "Plain")
    PREFILL = "prefill", pgettext_lazy("deployment role", "Prefill")
    DECODE = "decode", pgettext_lazy("deployment role", "Decode")


class RoutingPolicy(models.TextChoices):
    """How the gateway picks an instance of a deployment (its spec's `routing:`,
    panel/gateway/instances/routing.py)."""

    LEAST_OUTSTANDING = "least_outstanding", _("Least outstanding requests")
    PREFIX = "prefix", _("Prompt prefix (cache-aware)")
    SESSION = "session", _("Session affinity")


class DesiredState(models.TextChoices):
    RUNNING = "running", _("Running")
    STOPPED = "stopped", _("Stopped")
    DELETED = "deleted", _("Deleted")


class ArtifactFormat(models.TextChoices):
    HF = "hf", _("HuggingFace safetensors")
    W8A8_DYNAMIC = "w8a8_dynamic", _("W8A8 dynamic (vllm-ascend)")
    OM = "om", _("Ascend offline model (.om)")
    ONNX = "onnx", _("ONNX")


class ModelSource(models.TextChoices):
    HUGGINGFACE = "huggingface", _("HuggingFace")
    MODELSCOPE = "modelscope", _("ModelScope")
    LOCAL = "local", _("Path on a node")
