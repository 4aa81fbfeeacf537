"""Usage: every gateway request, recorded without slowing it down.

A finished request is one RPUSH of JSON onto a Redis list (with its in-flight count, token budget and
/metrics counters in the same round trip, after the last byte went to the client). The beat task
`panel.gateway.drain_usage` moves the list into UsageRecord rows and adds them to the hourly roll-ups
(UsageHour) in one transaction; `panel.gateway.prune_usage` keeps raw rows PANEL_GATEWAY_USAGE_RAW_DAYS and
roll-ups PANEL_GATEWAY_USAGE_HOURLY_DAYS.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from panel.accounts.models import ApiToken
from panel.core.infra import refusals
from panel.core.infra.panel_redis import texts
from panel.deployments.models import Deployment
from panel.gateway import sealing, store
from panel.gateway.access import limits
from panel.gateway.access.identity import Caller
from panel.gateway.instances import pool as pools
from panel.gateway.models import UsageHour, UsageRecord
from panel.gateway.proxy.relay import MAX_TOKENS

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the time-to-first-token histogram on /metrics.
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DRAIN_BATCH = 1000
UNKNOWN_MODEL = "(unknown)"
DRAIN_LOCK_S = 120
# Round trips of `finish` that outlived the task of their request, kept here until they are done (the event
# loop holds tasks only weakly).
_ending: set[asyncio.Future] = set()


@dataclass
class Finished:
    """What a request left behind; the JSON on the usage list."""

    request_id: str
    time: str  # ISO 8601, when it arrived
    token_id: int
    key: str
    user_id: int
    model: str
    endpoint: str
    stream: bool
    status: int
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    duration_ms: float = 0.0
    deployment_id: int | None = None
    deployment_name: str = ""
    instance: str = ""
    attempts: int = 1


def ttft_bucket(seconds: float) -> str:
    return next((f"{bound:g}" for bound in TTFT_BUCKETS if seconds <= bound), "+Inf")


async def finish(
    redis, caller: Caller, record: Finished, instance: pools.Instance | None, now: float
) -> None:
    """Record the request and stop counting it against its instance, in one round trip. Never raises: the
    client has its answer already, and a lost record must not turn into a failed request.

    The round trip is shielded from the request's own cancellation: a streaming client that leaves the
    moment its last chunk arrived cancels the request's task while it ends here, and a round trip cut off
    (before its commands went out, e.g. while a connection opens) lost the record and left the request
    counted in flight on its engine until the count's TTL, so every drain of that engine waited its whole
    grace (bench/failover.py's moves). A cancelled caller returns at once; the round trip completes."""
    ending = asyncio.ensure_future(_finish(redis, caller, record, instance, now))
    _ending.add(ending)
    ending.add_done_callback(_ending.discard)
    await asyncio.shield(ending)


async def _finish(
    redis, caller: Caller, record: Finished, instance: pools.Instance | None, now: float
) -> None:
    sep = store.FIELD_SEPARATOR
    try:
        async with redis.pipeline(transaction=False) as pipeline:
            pipeline.rpush(store.USAGE_QUEUE, sealing.seal(store.USAGE_QUEUE, asdict(record)))
            if instance is not None:
                pools.release(pipeline, instance, record.request_id)
            limits.spend(pipeline, caller, record.prompt_tokens + record.completion_tokens, now)
            # A name no deployment serves is the client's choice: it must not become a metric of its own.
            model = UNKNOWN_MODEL if record.error == "model_not_found" else record.model
            labels = f"{model}{sep}{record.key}"
            pipeline.hincrby(store.METRIC_REQUESTS, f"{labels}{sep}{record.status}", 1)
            if record.prompt_tokens:
                pipeline.hincrby(store.METRIC_TOKENS, f"{labels}{sep}prompt", record.prompt_tokens)
            if record.completion_tokens:
                pipeline.hincrby(store.METRIC_TOKENS, f"{labels}{sep}completion", record.completion_tokens)
            if record.ttft_ms is not None:
                seconds = record.ttft_ms / 1000
                pipeline.hincrby(store.METRIC_TTFT, f"{model}{sep}{ttft_bucket(seconds)}", 1)
                pipeline.hincrbyfloat(store.METRIC_TTFT, f"{model}{sep}sum", seconds)
            await pipeline.execute()
    except Exception:
        log.exception("usage of gateway request %s was not recorded", record.request_id)


# --- the beat side ------------------------------------------------------------------------------------


def drain(batch: int = DRAIN_BATCH) -> int:
    """Move finished requests from Redis into the database; returns how many items left the list. One
    drain at a time; a drain that dies after its commit but before trimming the list finds those rows
    stored and skips them. An item the panel did not write, or that does not parse, is skipped, logged and
    counted: it never stops the drain."""
    client = store.client()
    if not client.set(store.DRAIN_LOCK, "1", nx=True, ex=DRAIN_LOCK_S):
        return 0
    moved = 0
    try:
        while True:
            items = texts(client.lrange(store.USAGE_QUEUE, 0, batch - 1))
            if not items:
                break
            records = _readable(client, items)
            if records:
                _store_each_alone_if_need_be(client, records)
            client.ltrim(store.USAGE_QUEUE, len(items), -1)
            moved += len(items)
            if len(items) < batch:
                break
    finally:
        client.delete(store.DRAIN_LOCK)
    return moved


def _store_each_alone_if_need_be(client, records: list[dict]) -> None:
    """Store a batch in one transaction; should that fail, each record alone, skipping (and counting) the
    ones that fail again: one record the database refuses never stops the drain for everyone's usage."""
    try:
        store_records(records)
        return
    except Exception:
        log.exception("%d usage records failed together; storing each alone", len(records))
    for record in records:
        try:
            store_records([record])
        except Exception as error:
            log.warning("usage record %s skipped: %s", record.get("request_id"), error)
            refusals.count_state(client, "gateway-usage")


def _in_range(record: dict) -> None:
    """Raises ValueError unless the figures an engine influenced are in range (panel.gateway.proxy.relay
    bounds them on the way in; a record written before, or by an older process, is checked again here)."""
    if not 100 <= int(record["status"]) <= 599:
        raise ValueError(f"status {record['status']}")
    for name in ("prompt_tokens", "completion_tokens"):
        if not 0 <= int(record.get(name) or 0) <= MAX_TOKENS:
            raise ValueError(f"{name} {record.get(name)}")
    for name in ("ttft_ms", "duration_ms"):
        value = record.get(name)
        if value is not None and not 0 <= float(value) < 1e12:
            raise ValueError(f"{name} {value}")


def _readable(client, items: list[str]) -> list[dict]:
    """The usage records among `items` that the panel wrote and that parse; the others are counted."""
    records = []
    for item in items:
        try:
            record = sealing.opened(store.USAGE_QUEUE, item)
            Finished(**record)
            if parse_datetime(record["time"]) is None:
                raise ValueError("no time")
            _in_range(record)
        except (sealing.Unsealed, ValueError, KeyError, TypeError) as error:
            log.warning("usage item skipped (%s): %.200r", error, item)
            refusals.count_state(client, "gateway-usage")
            continue
        records.append(record)
    return records


def store_records(records: list[dict]) -> None:
    with transaction.atomic():
        known = set(
            UsageRecord.objects.filter(request_id__in=[r["request_id"] for r in records]).values_list(
                "request_id", flat=True
            )
        )
        fresh = [r for r in records if r["request_id"] not in known]
        if not fresh:
            return
        existing = _existing_ids(fresh)
        rows = [_row(record, existing) for record in fresh]
        UsageRecord.objects.bulk_create(rows)
        _add_to_hours(rows)
        _mark_last_used(rows)


def _existing_ids(records: list[dict]) -> dict[str, set[int]]:
    """Keys, users and deployments may be gone by the time their requests are drained."""
    from django.contrib.auth import get_user_model

    def present(model, name):
        wanted = {r[name] for r in records if r.get(name) is not None}
        return set(model.objects.filter(pk__in=wanted).values_list("pk", flat=True)) if wanted else set()

    return {
        "token_id": present(ApiToken, "token_id"),
        "user_id": present(get_user_model(), "user_id"),
        "deployment_id": present(Deployment, "deployment_id"),
    }


def _row(record: dict, existing: dict[str, set[int]]):
    ids = {
        name: record.get(name) if record.get(name) in present else None for name, present in existing.items()
    }
    # Cut to the columns' sizes: the model name is the client's, and one record too long for its column
    # would fail every drain of the list it sits in.
    when = parse_datetime(record["time"])
    if when is None:  # _readable lets through only records whose time parses
        raise ValueError(f"usage record {record['request_id']}: no time in {record['time']!r}")
    return UsageRecord(
        request_id=record["request_id"][:32],
        time=when,
        key=record["key"][:255],
        model=record["model"][:128],
        deployment_name=(record.get("deployment_name") or "")[:63],
        instance=(record.get("instance") or "")[:100],
        endpoint=record["endpoint"][:32],
        stream=bool(record.get("stream")),
        status=int(record["status"]),
        error=(record.get("error") or "")[:64],
        prompt_tokens=int(record.get("prompt_tokens") or 0),
        completion_tokens=int(record.get("completion_tokens") or 0),
        ttft_ms=record.get("ttft_ms"),
        duration_ms=float(record.get("duration_ms") or 0),
        attempts=int(record.get("attempts") or 1),
        **ids,
    )


def hour_of(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def _add_to_hours(rows) -> None:
    sums: dict[tuple, dict] = defaultdict(
        lambda: (
            dict.fromkeys(
                ("requests", "errors", "prompt_tokens", "completion_tokens", "ttft_ms_sum", "ttft_count"), 0
            )
            | {"duration_ms_sum": 0.0}
        )
    )
    owners = {}
    for row in rows:
        group = (hour_of(row.time), row.key, row.model, row.deployment_name)
        owners[group] = (row.token_id, row.user_id)
        total = sums[group]
        total["requests"] += 1
        total["errors"] += row.status >= 400
        total["prompt_tokens"] += row.prompt_tokens
        total["completion_tokens"] += row.completion_tokens
        total["duration_ms_sum"] += row.duration_ms
        if row.ttft_ms is not None:
            total["ttft_ms_sum"] += row.ttft_ms
            total["ttft_count"] += 1
    for (hour, key, model, deployment_name), total in sums.items():
        match = UsageHour.objects.filter(hour=hour, key=key, model=model, deployment_name=deployment_name)
        if not match.update(**{name: F(name) + value for name, value in total.items()}):
            token_id, user_id = owners[hour, key, model, deployment_name]
            UsageHour.objects.create(
                hour=hour,
                key=key,
                model=model,
                deployment_name=deployment_name,
                token_id=token_id,
                user_id=user_id,
                **total,
            )


def _mark_last_used(rows) -> None:
    """A key's last use, written here rather than on every request (one write per key per drain)."""
    latest: dict[int, datetime] = {}
    for row in rows:
        if row.token_id is not None and row.time > latest.get(row.token_id, row.time - timedelta(1)):
            latest[row.token_id] = row.time
    for token_id, when in latest.items():
        ApiToken.objects.filter(pk=token_id).filter(Q(last_used__isnull=True) | Q(last_used__lt=when)).update(
            last_used=when
        )


def prune(now: datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    raw_cutoff = now - timedelta(days=settings.PANEL_GATEWAY_USAGE_RAW_DAYS)
    hourly_cutoff = now - timedelta(days=settings.PANEL_GATEWAY_USAGE_HOURLY_DAYS)
    raw, _ = UsageRecord.objects.filter(time__lt=raw_cutoff).delete()
    hourly, _ = UsageHour.objects.filter(hour__lt=hourly_cutoff).delete()
    return {"raw": raw, "hourly": hourly}
