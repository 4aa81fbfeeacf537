"""Signed messages carry their time, an expiry and a nonce inside the signature (workers.identity): what is
stale, from the future, tampered with or replayed is refused, for tasks, envelopes and metric lines alike;
an agent remembers the nonces of tasks it accepted across a restart (workers.nonces)."""

import time

import pytest

from workers.identity import (
    AUTH_KWARG,
    CLOCK_SKEW_S,
    VALIDITY_S,
    Untrusted,
    check_task,
    fresh_stamp,
    inbox_kind,
    inbox_line,
    new_stamp,
    open_envelope_seal,
    open_inbox_seal,
    seal_for_panel,
    split_inbox_line,
    task_auth,
    use_keys,
)
from workers.nonces import SeenNonces

KEY_A = b"a" * 64


@pytest.fixture(autouse=True)
def keys():
    use_keys({"node-a": KEY_A})
    yield
    use_keys()


def signed_task(kwargs, validity_s=60.0):
    return {
        **kwargs,
        AUTH_KWARG: task_auth(KEY_A, "node-a", "agent.stop_deployment", "t1", "node-a", kwargs, validity_s),
    }


def with_stamp(kwargs, stamp):
    return {**kwargs, AUTH_KWARG: {**kwargs[AUTH_KWARG], "stamp": stamp}}


def test_a_fresh_stamp_counts_until_its_expiry_and_a_little_skew_after():
    now = time.time()
    stamp = fresh_stamp(new_stamp(10, now), "heartbeat", now + 10 + CLOCK_SKEW_S - 0.5)
    assert stamp.expires == pytest.approx(now + 10, abs=0.01)
    with pytest.raises(Untrusted, match="expired") as refused:
        fresh_stamp(new_stamp(10, now), "heartbeat", now + 10 + CLOCK_SKEW_S + 1)
    assert refused.value.reason == "stale"


def test_a_stamp_from_beyond_the_clock_skew_is_refused_as_future():
    now = time.time()
    with pytest.raises(Untrusted, match="in the future") as refused:
        fresh_stamp(new_stamp(5, now + CLOCK_SKEW_S + 30), "heartbeat", now)
    assert refused.value.reason == "future"


def test_a_stamp_claiming_longer_than_its_kind_may_count_is_refused():
    with pytest.raises(Untrusted, match="claims longer") as refused:
        fresh_stamp(new_stamp(VALIDITY_S["heartbeat"] * 60), "heartbeat")
    assert refused.value.reason == "malformed"
    for garbage in ("", "1:2", "a:b:c", "1:2:not-hex-nonce"):
        with pytest.raises(Untrusted):
            fresh_stamp(garbage, "task")


def test_a_task_whose_stamp_was_changed_no_longer_verifies():
    kwargs = signed_task({"operation_id": "x"})
    issued, expires, nonce = kwargs[AUTH_KWARG]["stamp"].split(":")
    later = f"{int(issued) + 3_600_000}:{int(expires) + 3_600_000}:{nonce}"
    with pytest.raises(Untrusted, match="does not verify") as refused:
        check_task("agent.stop_deployment", "t1", with_stamp(kwargs, later))
    assert refused.value.reason == "signature"
    with pytest.raises(Untrusted, match="does not verify"):
        check_task("agent.stop_deployment", "t1", with_stamp(kwargs, f"{issued}:{expires}:{'0' * 24}"))


def test_an_expired_task_is_refused_even_with_a_valid_signature(monkeypatch):
    kwargs = signed_task({"operation_id": "x"}, validity_s=60)
    monkeypatch.setattr(time, "time", lambda real=time.time(): real + 3600)
    with pytest.raises(Untrusted, match="expired") as refused:
        check_task("agent.stop_deployment", "t1", kwargs)
    assert refused.value.reason == "stale"


def test_a_replayed_task_is_refused_by_the_nonces_the_agent_kept_across_a_restart(tmp_path):
    kwargs = signed_task({"operation_id": "x"})
    first_run = SeenNonces(tmp_path)
    assert (
        check_task("agent.stop_deployment", "t1", kwargs, first_sight=first_run.first_sight).node == "node-a"
    )
    with pytest.raises(Untrusted, match="delivered before") as refused:
        check_task("agent.stop_deployment", "t1", kwargs, first_sight=first_run.first_sight)
    assert refused.value.reason == "replayed"
    restarted = SeenNonces(tmp_path)  # a new agent process on the same state directory
    with pytest.raises(Untrusted, match="delivered before"):
        check_task("agent.stop_deployment", "t1", kwargs, first_sight=restarted.first_sight)
    # The same task signed again (a re-sent operation) is a new message with a nonce of its own.
    again = signed_task({"operation_id": "x"})
    assert check_task("agent.stop_deployment", "t1", again, first_sight=restarted.first_sight)


def test_remembered_nonces_are_pruned_once_their_messages_expired(tmp_path, monkeypatch):
    seen = SeenNonces(tmp_path)
    assert seen.first_sight("node-a", fresh_stamp(new_stamp(1), "task"))
    assert len(list(tmp_path.iterdir())) == 1
    monkeypatch.setattr(time, "time", lambda real=time.time(): real + 3600)
    seen._pruned_at = float("-inf")
    assert seen.first_sight("node-a", fresh_stamp(new_stamp(1), "task"))
    assert len(list(tmp_path.iterdir())) == 1  # the expired one went; the new one stays


def test_an_envelope_verifies_with_its_stamp_and_refuses_a_tampered_time():
    envelope = seal_for_panel("panel.heartbeat", "node-a", {"node": "node-a", "x": 1})
    stamp = open_envelope_seal(KEY_A, "panel.heartbeat", envelope)
    assert stamp.expires - stamp.issued == pytest.approx(VALIDITY_S["heartbeat"], abs=0.01)
    issued, expires, nonce = envelope["stamp"].split(":")
    moved = {**envelope, "stamp": f"{int(issued) + 60_000}:{int(expires) + 60_000}:{nonce}"}
    with pytest.raises(Untrusted, match="does not verify"):
        open_envelope_seal(KEY_A, "panel.heartbeat", moved)
    unstamped = {k: v for k, v in envelope.items() if k != "stamp"}
    with pytest.raises(Untrusted):
        open_envelope_seal(KEY_A, "panel.heartbeat", unstamped)


def test_a_metrics_line_carries_its_stamp_inside_the_signature(monkeypatch):
    signer, seal, raw = split_inbox_line(inbox_line("node-a", b'{"node": "node-a"}'))
    assert (signer, raw) == ("node-a", b'{"node": "node-a"}')
    assert open_inbox_seal(KEY_A, seal, raw).nonce
    stamp, _, sig = seal.partition("/")
    issued, expires, nonce = stamp.split(":")
    with pytest.raises(Untrusted, match="does not verify"):
        open_inbox_seal(KEY_A, f"{int(issued) + 1000}:{int(expires) + 1000}:{nonce}/{sig}", raw)
    with pytest.raises(Untrusted, match="expired"):
        open_inbox_seal(KEY_A, seal, raw, now=time.time() + VALIDITY_S["metrics"] + CLOCK_SKEW_S + 1)


def test_a_heartbeat_line_is_sealed_for_its_kind_and_counts_only_briefly():
    raw = b'{"heartbeat":{"node":"node-a"}}'
    signer, seal, raw = split_inbox_line(inbox_line("node-a", raw, kind="heartbeat"))
    assert inbox_kind(raw) == "heartbeat"
    assert inbox_kind(b'{"node":"node-a"}') == "metrics"
    assert open_inbox_seal(KEY_A, seal, raw, kind="heartbeat").nonce
    with pytest.raises(Untrusted, match="does not verify"):
        open_inbox_seal(KEY_A, seal, raw)  # a heartbeat's seal is no metrics seal, nor the other way round
    with pytest.raises(Untrusted, match="expired"):
        open_inbox_seal(
            KEY_A, seal, raw, now=time.time() + VALIDITY_S["heartbeat"] + CLOCK_SKEW_S + 1, kind="heartbeat"
        )
