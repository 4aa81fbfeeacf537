"""Messages between agents and the panel. Both sides validate with these models; nothing else crosses."""

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

EventKind = Literal["log", "progress", "state", "result"]
OperationState = Literal["running", "succeeded", "failed", "cancelled"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class OperationEventMessage(BaseModel):
    seq: int = Field(ge=1)
    time: datetime
    kind: EventKind
    payload: dict[str, Any] = Field(default_factory=dict)


class EventBatch(BaseModel):
    """Numbered events of one attempt of one operation (every delivery of its task is an attempt, and each
    attempt numbers its events from 1). `final_seq` is set on the batch that ends the attempt, so the panel
    knows whether everything of it has arrived."""

    operation_id: str
    node: str
    attempt: int = Field(default=1, ge=1)
    events: list[OperationEventMessage]
    final_seq: int | None = None


class NpuSample(BaseModel):
    npu_id: int
    chip_id: int
    logic_id: int | None = None
    name: str | None = None
    health: str | None = None
    aicore_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    hbm_used_mb: float | None = None
    hbm_total_mb: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    processes: list[dict[str, Any]] = Field(default_factory=list)


class HostSample(BaseModel):
    cpu_pct: float
    memory_used_mb: float
    memory_total_mb: float
    load1: float


class MetricSample(BaseModel):
    time: datetime
    host: HostSample
    npus: list[NpuSample] = Field(default_factory=list)
    error: str | None = None


class MetricBatch(BaseModel):
    """Samples of one node. `seq` counts batches per agent run so a receiver can see gaps; the panel keeps
    only the newest sample of a batch for live views but stores every sample in its ring buffer."""

    node: str
    samples: list[MetricSample]
    seq: int = 0
    sent_at: datetime | None = None


class Heartbeat(BaseModel):
    node: str
    time: datetime
    agent_version: str
    interval_s: float = 5.0
    # Operations this agent holds a lease for (running now) and ones it finished lately: the panel's reaper
    # re-sends a running operation the agent no longer knows (it was killed) and leaves the rest alone.
    running: list[str] = Field(default_factory=list)
    done: list[str] = Field(default_factory=list)


class HeartbeatLine(BaseModel):
    """A heartbeat as the inbox carries it (workers.identity.HEARTBEAT_LINE_START): the agent's beats ride the
    metrics path, drained in batches, instead of a Celery task each."""

    heartbeat: Heartbeat
