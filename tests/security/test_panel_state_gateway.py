"""An attacker who can write to the panel's Redis tries to take over the gateway: a rewritten
`gw:pool:<name>` that sends users' prompts (and the engine key) to their server, a `gw:caller:<sha256>`
for a key the panel never issued, a genuine entry replayed after it expired or moved under another name,
and junk on `gw:usage` that used to stop the drain for good. Each is refused, counted, and the answer
comes from the database."""

import asyncio
import time

import orjson
import pytest
import time_machine

from panel.accounts.models import ApiToken, hash_token
from panel.core.infra import refusals
from panel.gateway import sealing, store
from panel.gateway.access import identity
from panel.gateway.accounting import usage
from panel.gateway.models import UsageRecord

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.attacks_panel]

ATTACKER = "http://203.0.113.7:8000/v1"


@pytest.fixture(autouse=True)
def fresh_gateway_state(_wired_to_redis):
    client = store.client()
    stale = list(client.scan_iter(f"{store.PREFIX}*"))
    if stale:
        client.delete(*stale)
    return client


def refused(kind: str) -> int:
    return refusals.state_counts(store.client()).get(kind, 0)


def resolve(raw: str, served_name: str | None = "chat") -> identity.Resolved:
    return asyncio.run(identity.resolve_cached(raw, served_name))


def forged_pool(served_name: str) -> dict:
    instance = {
        "id": "evil/0",
        "deployment_id": 1,
        "deployment": "evil",
        "base_url": ATTACKER,
        "sealed_key": "",
    }
    return {"pool": {"served_name": served_name, "instances": [instance]}}


def test_a_pool_entry_the_panel_did_not_write_routes_nowhere(bob):
    _token, raw = ApiToken.issue(bob, "app", scopes=["inference"])
    before = refused("gateway-pool")
    store.client().set(identity.pool_key("chat"), orjson.dumps(forged_pool("chat")), ex=60)

    answer = resolve(raw)

    assert answer.pool is None
    assert answer.refusal.code == "model_not_found"  # the database knows no deployment serving "chat"
    assert refused("gateway-pool") == before + 1
    # The database's answer replaced the forged entry.
    assert ATTACKER not in store.client().get(identity.pool_key("chat"))


def test_a_caller_entry_for_a_key_the_panel_never_issued_is_refused(bob):
    raw = "ap_made-up-by-the-attacker"
    entry = {
        "caller": {
            "token_id": 1,
            "key": "bob/app",
            "user_id": bob.pk,
            "allowed_models": [],
            "requests_per_minute": None,
            "tokens_per_minute": None,
        },
        "refusal": None,
    }
    before = refused("gateway-caller")
    store.client().set(identity.caller_key(hash_token(raw)), orjson.dumps(entry), ex=60)

    answer = resolve(raw, None)

    assert answer.caller is None
    assert answer.refusal.code == "invalid_api_key"
    assert refused("gateway-caller") == before + 1


def test_a_genuine_caller_entry_replayed_after_the_key_was_revoked_is_refused(bob):
    from panel.accounts.services import revoke_token

    token, raw = ApiToken.issue(bob, "app", scopes=["inference"])
    assert resolve(raw, None).caller is not None
    key = identity.caller_key(hash_token(raw))
    captured = store.client().get(key)
    revoke_token(token)  # drops the entry from Redis at once
    later = time.time() + identity.CALLER_TTL_S + sealing.EXPIRY_GRACE_S + 1
    with time_machine.travel(later, tick=False):
        store.client().set(key, captured)  # replayed, with no TTL of its own
        answer = resolve(raw, None)
    assert answer.caller is None
    assert answer.refusal.code == "invalid_api_key"


def test_a_genuine_pool_entry_moved_under_another_name_is_refused(bob):
    _token, raw = ApiToken.issue(bob, "app", scopes=["inference"])
    sealed = sealing.seal(identity.pool_key("cheap"), forged_pool("cheap"), 60)
    before = refused("gateway-pool")
    store.client().set(identity.pool_key("chat"), sealed, ex=60)

    assert resolve(raw).pool is None
    assert refused("gateway-pool") == before + 1


def test_junk_on_the_usage_list_is_skipped_and_counted_and_usage_keeps_draining(bob):
    from panel.gateway.access.identity import Caller

    token, _raw = ApiToken.issue(bob, "app", scopes=["inference"])
    genuine = usage.Finished(
        request_id="r1",
        time="2026-12-04T10:00:00+00:00",
        token_id=token.pk,
        key=token.label,
        user_id=bob.pk,
        model="qwen",
        endpoint="chat/completions",
        stream=False,
        status=200,
    )
    client = store.client()
    client.rpush(store.USAGE_QUEUE, "{}", "not json at all")
    client.rpush(store.USAGE_QUEUE, orjson.dumps({**genuine.__dict__, "request_id": "forged"}))

    async def finish():
        await usage.finish(store.aclient(), Caller.of(token), genuine, None, 0)

    asyncio.run(finish())
    client.rpush(store.USAGE_QUEUE, sealing.seal(store.USAGE_QUEUE, {"request_id": "half"}))
    before = refused("gateway-usage")

    assert usage.drain() == 5

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["r1"]
    assert refused("gateway-usage") == before + 4
    assert client.llen(store.USAGE_QUEUE) == 0
