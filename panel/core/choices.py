"""Choice sets with named constants and the status colour each one shows as (one meaning everywhere)."""

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


class OperationStatus(ColouredChoices):
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
