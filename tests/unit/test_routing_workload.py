"""bench/routing.py and bench/routing_ceiling.py share one workload: the ceiling's prediction is only worth
something if it replays the conversations the bench sends, at the times it sends them, against a cache that
forgets as vLLM's does."""

import argparse

from bench.routing_ceiling import BLOCK, Cache, Router
from bench.routing_workload import Workload, add_arguments, build, from_args


def test_two_phases_send_the_same_sizes_at_the_same_times_in_words_of_their_own():
    workload = Workload(conversations=5, turns=4)
    system_a, first = build(workload, text="least_outstanding 0")
    system_b, second = build(workload, text="prefix 0")
    assert system_a != system_b
    assert [c.start_s for c in first] == [c.start_s for c in second]
    assert [c.thinks_s for c in first] == [c.thinks_s for c in second]
    assert [c.opening for c in first] != [c.opening for c in second]
    assert [len(c.opening.split()) for c in first] == [len(c.opening.split()) for c in second]
    assert all(len(c.questions) == len(c.thinks_s) == 3 for c in first)
    assert build(workload, text="prefix 0") == (system_b, second)  # seeded: a rerun sends the same


def test_conversations_arrive_staggered_not_at_once():
    _system, conversations = build(Workload(conversations=20, arrival_s=2.0))
    starts = [c.start_s for c in conversations]
    assert starts == sorted(starts)
    assert starts[0] == 0.0
    assert starts[-1] > 10.0


def test_the_command_line_takes_every_workload_parameter():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--conversations", "48", "--think-s", "4.5", "--system-words", "100"])
    workload = from_args(args)
    assert (workload.conversations, workload.think_s, workload.system_words) == (48, 4.5, 100)
    assert workload.params()["turns"] == Workload().turns


def test_the_cache_forgets_the_least_recently_used_and_a_prompts_tail_before_its_head():
    cache = Cache(capacity=4)
    cache.keep([1, 2, 3])
    cache.keep([7, 8])  # 3, the old prompt's tail, goes first
    assert cache.cached_tokens([1, 2, 3]) == 2 * BLOCK
    assert cache.cached_tokens([7, 8]) == 2 * BLOCK
    cache.keep([1, 2])  # used again: now the newest
    cache.keep([9, 10])
    assert cache.cached_tokens([1, 2]) == 2 * BLOCK
    assert cache.cached_tokens([7]) == 0


def test_the_modelled_prefix_router_follows_the_holder_within_the_load_bound():
    router = Router("prefix", seed=1)
    assert router.pick(0, [11, 12], [0, 0]) in (0, 1)
    holder = router.holders[11]
    assert router.pick(1, [11, 12, 13], [2, 0] if holder == 0 else [0, 2]) == holder  # least + 2: kept
    assert router.pick(1, [11, 12, 13], [3, 0] if holder == 0 else [0, 3]) != holder  # past it: moved
