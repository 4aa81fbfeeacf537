"""The ingest's short way past the NPU health policy (panel.nodes.health.health_state): a healthy chip sampled
healthy is skipped only where the policy itself would leave its entry as it is. Checked against the policy:
the same samples through the ingest with and without the short way write the same entries and changes."""

import json
import random

import pytest

from panel.nodes.health import health_state
from panel.nodes.health.health_state import _observe_node, _quiet_entry, chip_field


def chip(npu_id=0, health="OK", probe=None):
    return {"npu_id": npu_id, "chip_id": 0, "health": health, "probe": probe}


def fresh_entry():
    """A chip's entry as read from the database: its state, an empty memory."""
    return json.dumps({"state": "ok", "memory": {}})


def test_a_quiet_sample_writes_the_quiet_entry_once_then_nothing():
    entries = {chip_field(0, 0): fresh_entry()}
    written, changes = _observe_node(entries, [[chip()]], now=100.0)
    assert written == {chip_field(0, 0): _quiet_entry(0, 0)}
    assert changes == []
    assert _observe_node(written, [[chip()]], now=101.0) == ({}, [])


@pytest.mark.parametrize(
    "sample",
    [
        chip(health="Warning"),
        chip(health="Alarm"),
        chip(health=None),
        chip(probe={"ecc": {"hbm_double": 0}, "link": "UP", "link_up_count": 1}),
        chip(probe={"gone": True}),
    ],
)
def test_a_sample_that_says_something_goes_through_the_policy(sample):
    entries = {chip_field(0, 0): _quiet_entry(0, 0)}
    written, _changes = _observe_node(entries, [[sample]], now=100.0)
    assert written, "the policy kept something of it"
    assert written[chip_field(0, 0)] != _quiet_entry(0, 0)


def test_a_warning_chip_turns_suspect_from_the_quiet_entry():
    entries = {chip_field(0, 0): _quiet_entry(0, 0)}
    _written, changes = _observe_node(entries, [[chip(health="Warning")]], now=100.0)
    assert [(c["old"], c["new"], c["signal"]) for c in changes] == [("ok", "suspect", "health_word")]


def test_only_the_quiet_entry_with_a_quiet_sample_skips_the_policy(monkeypatch):
    from panel.nodes.health import npu_health

    observed = []
    policy = npu_health.observe
    monkeypatch.setattr(npu_health, "observe", lambda *a, **k: observed.append(a) or policy(*a, **k))
    overridden = {"state": "ok", "memory": {"forgiven": [], "overridden_at": 5.0, "last_chip": chip()}}
    for entry, expected in [
        (_quiet_entry(0, 0), 0),
        (json.dumps(overridden, sort_keys=True), 1),  # the admin's override is in its memory
        (json.dumps({"state": "suspect", "memory": json.loads(_quiet_entry(0, 0))["memory"]}), 1),
    ]:
        observed.clear()
        _observe_node({chip_field(0, 0): entry}, [[chip()]], now=100.0)
        assert len(observed) == expected, entry


def random_sample(rng: random.Random, npu_id: int) -> dict:
    roll = rng.random()
    if roll < 0.7:
        return chip(npu_id)
    if roll < 0.8:
        return chip(npu_id, health=rng.choice(["Warning", "Alarm", "Critical", "UNKNOWN"]))
    ecc = {"hbm_double": rng.choice([0, 0, 1]), "hbm_single": rng.randrange(3)}
    link = rng.choice(["UP", "UP", "DOWN"])
    return chip(npu_id, probe={"ecc": ecc, "link": link, "link_up_count": rng.randrange(3)})


def run(samples_by_second, short_way: bool, monkeypatch) -> list:
    """Every second's samples through _observe_node, entries kept between seconds as the hash keeps them;
    with the short way, or with the policy for every sample."""
    if not short_way:
        monkeypatch.setattr(health_state, "_quiet_entry", lambda npu_id, chip_id: None)
    entries = {chip_field(n, 0): fresh_entry() for n in range(4)}
    seen = []
    for second, samples in enumerate(samples_by_second):
        written, changes = _observe_node(entries, [samples], now=1000.0 + 30 * second)
        entries |= written
        for change in changes:  # as apply_changes would have stored them
            entry = json.loads(entries[chip_field(change["npu_id"], 0)])
            entries[chip_field(change["npu_id"], 0)] = json.dumps({**entry, "state": change["new"]})
        seen.append((dict(entries), changes))
    monkeypatch.undo()
    return seen


def test_the_short_way_changes_nothing_the_policy_decides(monkeypatch):
    rng = random.Random(11)
    seconds = [[random_sample(rng, n) for n in range(4)] for _ in range(300)]
    assert run(seconds, True, monkeypatch) == run(seconds, False, monkeypatch)
