"""Which engine instance serves a request: the healthy instances of a served model name, least outstanding
requests first.

Membership comes from the database, as the reconcile loop leaves it: an instance is in the pool while its
deployment is wanted running, is observed running and passed its last probe (a failed /health probe sets
`probe_failures`, a dead process `unhealthy`, either takes it out at once: the gateway reads the pool through
a Redis copy that the deployment's save drops, panel.gateway.access.identity); when every instance missed its
last probe and none is dead, all of them are routed to rather than none. A deployment has one engine instance
(the API server of its head node); replicas are deployments of their own that share the served name, and
everything here handles any number of instances per name.

Outstanding requests are counted in Redis (panel.gateway.store), so every web process sees the others'.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass

from django.conf import settings
from django.db.models import Q

from panel.core.domain.choices import DeploymentState, DesiredState, NodeStatus, NpuHealthState
from panel.deployments.launch.engine_keys import opened
from panel.deployments.models import Deployment
from panel.deployments.services import engine_url, served_name_of
from panel.deployments.sleep_state import can_sleep
from panel.gateway import store
from panel.gateway.instances import failover, routing

SUSPECT_S = 5.0  # how long an instance that just failed a request is avoided (about two probe intervals)
REFRESH_S = 60.0  # a long stream says it is still outstanding this often
SUSPECT_PENALTY = 1_000_000
# A web process may route by a copy of the pool read just before an instance left it (identity.POOL_TTL_S),
# so an instance counts as still routed to for this long after its last pick: a drain waits that out too.
PICKED_S = 8
WEIGHT_UNIT_BYTES = 1024  # a weighed request counts one unit per KiB of its body (a prefill: its prompt)

# KEYS: the instances' in-flight sets, their suspect flags, then their last-picked flags. ARGV: now, forget
# before, request id, rotation (ties go to a random instance, not always the first), key lifetime, the
# suspect penalty, how long a pick is remembered, then "weighed" or not: an instance's load is its count of
# requests in flight, or (weighed) the sum of its requests' weights (`weighed_id`; 1 for an id without one).
PICK_LEAST_OUTSTANDING = """
local n = #KEYS / 3
local best, best_load = 0, nil
for i = 1, n do
  local j = ((i - 1 + tonumber(ARGV[4])) % n) + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[j], '-inf', ARGV[2])
  local load = 0
  if ARGV[8] == 'weighed' then
    for _, member in ipairs(redis.call('ZRANGE', KEYS[j], 0, -1)) do
      load = load + (tonumber(string.match(member, '~(%d+)$')) or 1)
    end
  else
    load = redis.call('ZCARD', KEYS[j])
  end
  if redis.call('EXISTS', KEYS[n + j]) == 1 then load = load + tonumber(ARGV[6]) end
  if best_load == nil or load < best_load then best, best_load = j, load end
end
redis.call('ZADD', KEYS[best], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[best], ARGV[5])
redis.call('SET', KEYS[2 * n + best], '1', 'EX', ARGV[7])
return best - 1
"""


@dataclass(frozen=True)
class Instance:
    """One engine process that answers a served model name."""

    id: str  # "<deployment>/<replica>": what usage rows and metrics call it
    deployment_id: int
    deployment: str
    base_url: str  # the engine's OpenAI base, http://host:port/v1
    sealed_key: str  # the deployment's engine key as the row keeps it (panel.deployments.launch.engine_keys)
    role: str = ""  # "" plain, or prefill / decode of a disaggregated deployment (panel.gateway.proxy.pd)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {opened(self.sealed_key)}"} if self.sealed_key else {}

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Pool:
    served_name: str
    instances: tuple[Instance, ...]  # the healthy ones; empty: the name is deployed but nothing serves now
    routing: str = (
        routing.LEAST_OUTSTANDING
    )  # the deployment's routing policy (panel.gateway.instances.routing)
    # Whether an engine of the name can sleep (launched for `idle:`, panel.deployments.sleep_state.can_sleep):
    # only then does a request note its time and look for a sleeping engine (panel.gateway.instances.wake).
    idle: bool = False

    def as_dict(self) -> dict:
        instances = [i.as_dict() for i in self.instances]
        return {
            "served_name": self.served_name,
            "instances": instances,
            "routing": self.routing,
            "idle": self.idle,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Pool:
        instances = tuple(Instance(**i) for i in data["instances"])
        policy = data.get("routing") or routing.LEAST_OUTSTANDING
        return cls(data["served_name"], instances, policy, bool(data.get("idle")))


def instance_ids(deployment: Deployment) -> list[str]:
    """What the pool calls the deployment's engine instances (one today: its head node's API server)."""
    return failover.instance_ids(deployment)


def _instances_of(deployment: Deployment) -> list[Instance]:
    return [
        Instance(
            id=instance_id,
            deployment_id=deployment.pk,
            deployment=deployment.name,
            base_url=engine_url(deployment),
            sealed_key=deployment.engine_key,
            role=deployment.role,
        )
        for instance_id in instance_ids(deployment)
    ]


def _running(deployment: Deployment, excluded: set[int]) -> bool:
    """Wanted and observed running (a dead process is `unhealthy` at once), not excluded."""
    return (
        deployment.desired_state == DesiredState.RUNNING
        and deployment.observed_state == DeploymentState.RUNNING
        and deployment.pk not in excluded  # a failed NPU, its node offline or draining
    )


def _excluded(deployments: list[Deployment]) -> set[int]:
    """The pks of `deployments` whose instances are excluded (failover.cause_of). One query finds the few that
    could be (a failed NPU, an offline or cordoned node); only those are asked why: asked of every one, it was
    four queries per engine on every pool read, which each web process makes every few seconds beside its
    requests (7 ms of CPU for two engines, holding the GIL from the requests in flight)."""
    suspects = (
        Deployment.objects.filter(pk__in=[d.pk for d in deployments])
        .filter(
            Q(npus__health_state=NpuHealthState.FAILED)
            | Q(nodes__status=NodeStatus.OFFLINE)
            | Q(nodes__cordoned=True)
        )
        .distinct()
    )
    return {d.pk for d in suspects if failover.cause_of(d) is not None}


def deployments_named(served_name: str):
    """Deployments wanted running that serve `served_name` (the served name defaults to the deployment's)."""
    candidates = Deployment.objects.filter(desired_state=DesiredState.RUNNING).filter(
        Q(spec__served_model_name=served_name) | Q(name=served_name)
    )
    return [d for d in candidates.order_by("pk") if served_name_of(d) == served_name]


def pool_for(served_name: str) -> Pool | None:
    """The pool of `served_name`, or None when no deployment serves that name (a 404, not a 503)."""
    deployments = deployments_named(served_name)
    if not deployments:
        return None
    excluded = _excluded(deployments)
    running = [d for d in deployments if _running(d, excluded)]
    healthy = [instance for d in running if d.probe_failures == 0 for instance in _instances_of(d)]
    if not healthy:
        # Every engine missed its last /health probe and none is known dead: route to them rather than to
        # none, as Envoy's panic threshold does. On a loaded host the probes (2 s each) miss together:
        # bench/elastic.py saw five live replicas out at once and 59 requests refused in gaps of seconds. A
        # dead one is refused at connect and the request tried on the next
        # (panel/gateway/instances/failover.py).
        healthy = [instance for d in running for instance in _instances_of(d)]
    # The primary's spec says how its replicas are routed (replicas' own rows keep the default).
    primary = next((d for d in deployments if d.replica_of_id is None), deployments[0])
    return Pool(served_name, tuple(healthy), primary.routing, any(can_sleep(d) for d in deployments))


def served_names() -> list[str]:
    """Every served model name of a deployment wanted running (GET /v1/models)."""
    wanted = Deployment.objects.filter(desired_state=DesiredState.RUNNING).order_by("name")
    return sorted({served_name_of(d) for d in wanted})


def weighed_id(request_id: str, body_bytes: int) -> str:
    """The id to count a request by when its instance's load is weighed (`acquire(weighed=True)`): a
    prefill's work grows with its prompt, so a 30k-token prompt weighs more than a few short ones."""
    return f"{request_id}~{max(1, body_bytes // WEIGHT_UNIT_BYTES)}"


@dataclass(frozen=True)
class Pick:
    """One choice of an instance: among `instances`, counted as `request_id`, by `route` (panel.gateway.
    instances.routing) or by the least outstanding requests (`weighed`: the least outstanding weight,
    `weighed_id`)."""

    instances: list[Instance]
    request_id: str
    route: routing.Route | None = None
    weighed: bool = False

    def command(self) -> tuple:
        """The EVAL arguments that choose an instance and count the request against it, in one step."""
        instances = self.instances
        keys = (
            [store.inflight_key(i.id) for i in instances]
            + [store.suspect_key(i.id) for i in instances]
            + [store.picked_key(i.id) for i in instances]
        )
        now = time.time()
        ttl = settings.PANEL_GATEWAY_INFLIGHT_TTL_S
        rotation = random.randrange(len(instances))
        args = [now, now - ttl, self.request_id, rotation, int(ttl) + 60, SUSPECT_PENALTY, PICKED_S]
        if self.route is not None:
            return routing.pick_command(self.route, [i.id for i in instances], keys, args)
        weighing = "weighed" if self.weighed else "counted"
        return (PICK_LEAST_OUTSTANDING, len(keys), *keys, *args, weighing)


async def acquire(
    redis, instances: list[Instance], request_id: str, route=None, *, weighed: bool = False
) -> Instance:
    """Count `request_id` against the instance with the fewest outstanding requests (`weighed`: the least
    outstanding weight, `weighed_id`) and return it, or the one its `route` (panel.gateway.instances.routing)
    prefers within the load bound. The choice and the count happen together in Redis, so racing web processes
    spread out."""
    pick = Pick(instances, request_id, route, weighed)
    return instances[int(await redis.eval(*pick.command()))]


async def acquire_each(redis, picks: list[Pick]) -> list[Instance]:
    """`acquire` for each of `picks`, in one round trip (a disaggregated request's prefill and decode)."""
    async with redis.pipeline(transaction=False) as pipeline:
        for pick in picks:
            pipeline.eval(*pick.command())
        chosen = await pipeline.execute()
    return [pick.instances[int(index)] for pick, index in zip(picks, chosen, strict=True)]


def release(pipeline, instance: Instance, request_id: str) -> None:
    """Queue the end of `request_id` on `instance` on a pipeline (sent with the usage record)."""
    pipeline.zrem(store.inflight_key(instance.id), request_id)


async def failed(redis, instance: Instance, request_id: str) -> None:
    """`instance` failed before its first byte: no longer count it, and avoid it for a few seconds."""
    async with redis.pipeline(transaction=False) as pipeline:
        release(pipeline, instance, request_id)
        pipeline.set(store.suspect_key(instance.id), "1", px=int(SUSPECT_S * 1000))
        await pipeline.execute()


async def still_serving(redis, instance: Instance, request_id: str) -> None:
    """A long stream renews its count, so a web process that died mid-stream stops counting after the TTL."""
    await redis.zadd(store.inflight_key(instance.id), {request_id: time.time()}, xx=True)


def outstanding(instance_id: str) -> int:
    """Requests `instance_id` is serving now, across every web process (a drain waits for 0)."""
    client = store.client()
    key = store.inflight_key(instance_id)
    client.zremrangebyscore(key, "-inf", time.time() - settings.PANEL_GATEWAY_INFLIGHT_TTL_S)
    return int(client.zcard(key))


def recently_picked(instance_id: str) -> bool:
    """Whether a web process sent `instance_id` a request within PICKED_S (it may still route by a stale
    copy of the pool, so a drain waits until this is over too)."""
    return bool(store.client().exists(store.picked_key(instance_id)))


def serves(deployment: Deployment) -> bool:
    """Whether any engine of the deployment has requests in flight or was picked within PICKED_S
    (panel.deployments.rollouts.drain asks this before a stop goes out)."""
    return any(outstanding(i) > 0 or recently_picked(i) for i in instance_ids(deployment))
