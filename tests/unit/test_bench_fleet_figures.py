"""bench/fleet.py counts what it names (issue 34): every viewer watches a full dashboard page, every node's
samples are checked against what the panel stored, the windows combine into a median with its spread, a
target is judged on the worst window, and a publish error or a process that died fails the run."""

from bench.fleet_figures import across, failures, lost_examples, lost_on_screen, not_stored, screens, targets
from bench.live_viewers import Server, Window, spent


def window(**figures) -> dict:
    base = {
        "p99_ms": 100.0,
        "lost": 0,
        "not_stored": 0,
        "lost_all": 0,
        "panel_cpu_cores": 0.5,
        "infra_cpu_cores": {"postgres": 0.1, "total": 0.1},
        "push_vs_poll": 8.0,
        "push_vs_poll_all_in": 2.0,
        "ingest_lag_ms": [50.0, 90.0],
        "publish_errors": {"metrics": 0, "log": 0},
        "deaths": [],
    }
    return base | figures


def test_32_viewers_of_a_50_node_page_watch_every_one_of_512_nodes():
    names = [f"n{i:03d}" for i in range(512)]
    pages = screens(names, 32, 50)
    assert {len(page) for page in pages} == {50}
    assert {name for page in pages for name in page} == set(names)


def test_a_small_fleet_is_one_page_for_everyone():
    assert screens(["a", "b", "c"], 2, 50) == [["a", "b", "c"], ["a", "b", "c"]]


def test_loss_counts_each_viewer_on_screen_and_every_node_in_the_store():
    sent = {"a": {1: 1000, 2: 2000}, "b": {1: 1000}, "off-screen": {1: 1000, 2: 2000}}
    received = [{"a": {1: 5.0, 2: 5.0}}, {"a": {1: 5.0}}]  # the second viewer missed a's seq 2, and b's
    assert lost_on_screen([["a"], ["a", "b"]], received, sent) == 2
    stored = {"a": {1000, 2000}, "b": {1000}, "off-screen": {1000}}
    assert not_stored(sent, stored) == 1  # on no screen, still checked
    window = Window()
    window.end = 3.0
    assert lost_examples([["a"], ["a", "b"]], received, sent, window) == [
        "viewer 1 node a seq 2, taken 1.0 s before the end",
        "viewer 1 node b seq 1, taken 2.0 s before the end",
    ]
    assert len(lost_examples([["a"], ["a", "b"]], received, sent, window, most=1)) == 1


def test_windows_give_the_median_the_spread_and_the_sum_of_what_was_lost():
    windows = [
        window(p99_ms=100.0, lost=1, lost_all=1),
        window(p99_ms=300.0),
        window(p99_ms=200.0, lost=2, lost_all=2),
    ]
    combined = across(windows)
    assert combined["p99_ms"] == 200.0
    assert combined["spread"]["p99_ms"] == [100.0, 300.0]
    assert combined["lost"] == 3
    assert combined["infra_cpu_cores"]["postgres"] == 0.1
    assert combined["ingest_lag_ms"] == [50.0, 90.0]


def test_a_target_is_judged_on_the_worst_window():
    met = targets([window(), window(p99_ms=600.0), window()])
    assert met["p99_under_500_ms"] is False
    assert met["push_5x_cheaper_web"] is True
    assert targets([window(), window(push_vs_poll_all_in=1.4)])["push_1_5x_cheaper_all_in"] is False


def test_publish_errors_and_deaths_fail_the_run_and_say_which_window():
    assert failures([window(), window()]) == []
    found = failures([window(), window(publish_errors={"metrics": 2, "log": 0}, deaths=["web 4242"])])
    assert found == ["window 2: publish errors {'metrics': 2}", "window 2: exited ['web 4242']"]
    assert across([window(deaths=["beat 7"]), window(deaths=["web 8"])])["deaths"] == ["beat 7", "web 8"]


class Titled:
    def __init__(self, title: str):
        self.title = title

    def cmdline(self) -> list[str]:
        return [self.title]


def test_postgres_counts_its_own_database_backends_and_the_server_processes_only():
    server = Server.__new__(Server)
    server.label, server.database = "postgres", "bench_fleet_1"
    assert server.ours(Titled("postgres: 15/main: postgres bench_fleet_1 127.0.0.1(5500) idle"))
    assert server.ours(Titled("postgres: 15/main: checkpointer "))
    assert server.ours(Titled("postgres: bench bench_fleet_1 [local] SELECT"))
    assert not server.ours(Titled("postgres: 15/main: postgres test_gw0 127.0.0.1(5501) idle"))


def test_cpu_between_snapshots_counts_what_lived_through_both_and_what_was_reaped():
    before = {("postgres", 0): 1.0, ("postgres", 10): 5.0, ("postgres", 11): 2.0}
    after = {("postgres", 0): 1.5, ("postgres", 10): 6.0, ("postgres", 12): 9.0}  # 11 exited, 12 is new
    assert spent(before, after) == {"postgres": 1.5}
