"""What a new admin hits in the first hour (issue 17), each checked in a real browser against a live panel:
a failed start's diagnosis stays on the deployment page, with the hint that fits NPUs; the deployment page's
charts back-fill the last hour, its log leaves out the panel's own probes, its curl snippet wraps and copies,
and "… is starting" goes once the deployment runs; the settings page shows the token placeholder; one
navigation link is lit; big counts read "113.0 M"; chart axes never print one label twice and the NPU
drawer's HBM axis tops out above its line."""

import re
import time

import pytest
from playwright.sync_api import expect

from panel.run import free_port
from tests.browser.conftest import wait_until

SIM_NODE = "sim-a2"
# Each deployment here holds its own NPU: the wizard test in test_deployments.py takes NPU 0.
RUNNING = ("first-hour", 1)
DOOMED = ("first-hour-doomed", 2)
NPU_ONLY_HINT = "vllm-ascend and CANN versions on this node"
CPU_ONLY_HINT = "CPU backends"
# The labels uPlot printed on each axis of the chart in a box (charts.js and npu_chart.js keep it as .uplot).
AXIS_LABELS = "box => box.uplot.axes.map((a) => (a._values || []).filter((v) => v !== null && v !== ''))"


def deploy(live_panel, model: dict, name: str, npu: int, *, wait: bool = True) -> dict:
    """A deployment of the tiny model on one NPU of the sim host, through the API; waits until it runs
    unless `wait` is false."""
    with live_panel.api("bob") as client:
        listed = client.get("/api/v1/deployments/").json()["results"]
        deployment = next((d for d in listed if d["name"] == name), None)
        if deployment is None:
            # Other tests' deployments may hold NPUs (stopped ones keep theirs): take the first free one.
            held = {n["npu_id"] for d in listed for n in d["npus"] if n["node"] == SIM_NODE}
            # A failed NPU takes no placement (an earlier test's sim fault may have left one failed).
            npus_now = live_panel.node(SIM_NODE)["npus"]
            held |= {n["npu_id"] for n in npus_now if n.get("health_state") == "failed"}
            npu = next(i for i in [npu, *range(8)] if i not in held)
            response = client.post(
                "/api/v1/deployments/",
                json={
                    "name": name,
                    "model": model["id"],
                    "artifact": next(a["id"] for a in model["artifacts"] if a["ready"]),
                    "nodes": [{"node": SIM_NODE, "npus": [npu]}],
                    "max_model_len": 1024,
                    # A port free on this machine: sim engines are real processes, and other panels' engines
                    # may hold the planner's default.
                    "port": free_port(),
                },
            )
            assert response.status_code == 201, response.text
            deployment = response.json()
        if not wait:
            return deployment
        url = f"/api/v1/deployments/{deployment['id']}/"
        seen = {}

        def running():
            seen.update(client.get(url).json())
            return seen["status"] == "running" and dict(seen)

        try:
            return wait_until(running, 90, f"{name} was not running")
        except TimeoutError as error:
            raise TimeoutError(f"{error}: {seen['status']}, {seen['reason']!r}") from None


def delete(live_panel, deployment: dict) -> None:
    """Delete it and wait: a sim engine is a real process that would outlive the panel, and the NPUs go back
    to the planner (the wizard test expects NPU 0 suggested)."""
    url = f"/api/v1/deployments/{deployment['id']}/"
    with live_panel.api("bob") as client:
        client.delete(url)
        gone = lambda: client.get(url).status_code == 404  # noqa: E731
        wait_until(gone, 60, f"{deployment['name']} was not deleted")


@pytest.fixture(scope="module")
def running(live_panel, staged_model):
    deployment = deploy(live_panel, staged_model, *RUNNING)
    yield deployment
    delete(live_panel, deployment)


def test_a_failed_start_keeps_its_findings_with_the_npu_hint(live_panel, staged_model, panel_page):
    # Every start's first request kills the engine. (A restart of a running deployment would not show it:
    # it surges a new replica, and the old one keeps serving when the new one fails.)
    root = str(live_panel.sim_root(SIM_NODE))
    live_panel.sim("fault", "--root", root, "--engine-dies-on-first-request")
    deployment = None
    try:
        deployment = deploy(live_panel, staged_model, *DOOMED, wait=False)
        url = f"/api/v1/deployments/{deployment['id']}/"
        with live_panel.api("bob") as client:
            # It fails at every start and, five restarts later, gives up: failed for good, with its findings.
            def gave_up():
                d = client.get(url).json()
                settled = d["status"] == "failed" and not d["next_restart_at"]
                return d if settled and d["findings"]["findings"] else None

            failed = wait_until(gave_up, 180, f"{DOOMED[0]} did not give up with findings")
        assert {f["code"] for f in failed["findings"]["findings"]} >= {"mla_head_dim"}

        page = panel_page("bob")
        with page.expect_response(lambda r: r.url.endswith(url)):
            page.goto(f"/deployments/{DOOMED[0]}/")
        page.wait_for_timeout(1000)  # the page's script has had the API's answer: it must not hide the box
        findings = page.get_by_test_id("findings")
        expect(findings).to_be_visible()
        expect(findings).to_contain_text("No MLA attention kernel for this model's head size")
        expect(findings).to_contain_text(NPU_ONLY_HINT)
        expect(findings).not_to_contain_text(CPU_ONLY_HINT)
        expect(page.locator("[data-field=reason]")).not_to_contain_text(CPU_ONLY_HINT)
    finally:
        live_panel.sim("fault", "--root", root, "--clear")
        if deployment:
            delete(live_panel, deployment)


def test_the_deployment_page_back_fills_its_charts_and_hides_the_probe_lines(live_panel, running, panel_page):
    history_url = f"/api/v1/deployments/{running['id']}/metrics/history/"
    with live_panel.api("charlie") as client:
        kept = lambda: len(client.get(history_url).json()["points"]) >= 5  # noqa: E731
        wait_until(kept, 60, "fewer than 5 scrapes kept")
        probes = f"/api/v1/deployments/{running['id']}/logs/"
        wait_until(
            lambda: any(
                "GET /health" in line["line"]
                for line in client.get(probes, params={"probes": "true"}).json()["results"]
            ),
            30,
            "no probe line in the engine log",
        )
    time.sleep(2)  # the oldest kept point is now older than the page
    page = panel_page("charlie")
    loaded = time.time()
    with page.expect_response(lambda r: r.url.endswith(history_url)):
        page.goto(f"/deployments/{RUNNING[0]}/")
    points = "Number(document.getElementById('deployment').dataset.metricPoints)"
    page.wait_for_function(f"{points} >= 5", timeout=5_000)
    first = page.evaluate("document.querySelector('[data-chart=requests]').uplot.data[0][0]")
    assert first < loaded - 1, "the charts start at the page load, not an hour back"

    log = page.locator("[data-field=log]")
    expect(log.locator(".log-line").first).to_be_visible(timeout=15_000)
    expect(log).not_to_contain_text("GET /health", use_inner_text=True)  # the panel's probes: hidden
    expect(log).not_to_contain_text("GET /metrics", use_inner_text=True)
    expect(page.get_by_test_id("probe-lines")).to_have_text(re.compile(r"^show \d[\d,]* probe lines"))
    page.get_by_test_id("show-probes").check()  # and shown on request
    expect(log.locator(".log-probe").first).to_be_visible()
    expect(log).to_contain_text("GET /health", use_inner_text=True)


def test_the_curl_snippet_wraps_and_copies_whole(live_panel, running, panel_page):
    page = panel_page("charlie")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/deployments/{RUNNING[0]}/")
    snippet = page.locator("#snippet-curl")
    expect(snippet).to_contain_text("/chat/completions")
    assert snippet.evaluate("pre => pre.scrollWidth <= pre.clientWidth + 1"), "the curl snippet is cut off"
    page.locator("[data-copy='#snippet-curl']").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == snippet.text_content()
    assert '"max_tokens": 64}' in copied


def test_the_starting_message_goes_once_the_deployment_runs(live_panel, running, panel_page):
    page = panel_page("bob")
    page.goto(f"/deployments/{RUNNING[0]}/")
    page.get_by_test_id("action-restart").click()
    page.get_by_test_id("confirm-ok").click()
    message = page.locator(".messages .message", has_text=f"Restarting {RUNNING[0]}")
    expect(message).to_be_visible()
    # A restart surges: the status still reads Running while the new engine starts, so the message is what
    # the test waits on; it goes once the deployment moved and settled, and then it runs.
    expect(message).to_have_count(0, timeout=90_000)
    expect(page.get_by_test_id("deployment-status")).to_have_text("Running", timeout=90_000)


def test_settings_show_the_token_placeholder(panel_page):
    page = panel_page("alice")
    page.goto("/accounts/settings/")
    expect(page.get_by_test_id("token-help")).to_contain_text("Authorization: Bearer <token>")


def test_one_navigation_link_is_lit_on_a_node_provisioning_page(live_panel, panel_page):
    page = panel_page("alice")
    page.goto(f"/provisioning/nodes/{SIM_NODE}/")
    active = page.locator(".sidebar a.active")
    expect(active).to_have_count(1)
    expect(active).to_have_text("Provisioning")
    page.goto(f"/nodes/{SIM_NODE}/")
    expect(active).to_have_count(1)
    expect(active).to_have_text("Nodes")


BIG_UNITS = {"en": r"\d[\d,]*\.\d+ (K|M|B)", "zh-hans": r"\d[\d,]*\.\d+ (万|亿)"}


@pytest.mark.parametrize(("locale", "unit"), BIG_UNITS.items())
def test_the_wizard_writes_big_counts_short(staged_model, panel_page, locale, unit):
    page = panel_page("bob", locale=locale)
    page.goto("/deployments/new/")
    row = page.locator("[data-testid=model-table] tr", has_text=staged_model["name"])
    row.locator("input[type=radio]").check()
    page.fill("#id_name", f"big-counts-{locale}")
    page.get_by_test_id("wizard-next").click()
    suggestion = page.get_by_test_id("suggestion")
    expect(suggestion).to_be_visible()
    expect(suggestion).to_contain_text(re.compile(unit))
    assert not re.search(r"\d{6,}", suggestion.text_content()), suggestion.text_content()
    page.get_by_test_id("wizard-next").click()
    tile = page.get_by_test_id("plan-kv-tokens")
    expect(tile).to_have_text(re.compile(rf"^{unit}$"))
    assert tile.evaluate("t => t.scrollWidth <= t.clientWidth + 1"), "the KV tokens tile overflows"


def test_axes_print_each_label_once_and_hbm_tops_out_above_its_line(live_panel, staged_model, panel_page):
    page = panel_page("charlie")
    page.locator(f'.node-section[data-node="{SIM_NODE}"] .npu-card[data-npu="1"][data-chip="0"]').click()
    drawer = page.get_by_test_id("npu-drawer")
    expect(drawer.locator(".chart .uplot canvas")).to_have_count(4)
    hbm = drawer.locator('.chart[data-metric="hbm_used"]')
    page.wait_for_function(
        "() => { const p = document.querySelector('.chart[data-metric=hbm_used]').uplot;"
        " return p && p.data[1].some((v) => v !== null); }"
    )
    top, highest = hbm.evaluate(
        "box => [Math.max(...box.uplot.axes[1]._splits),"
        " Math.max(...box.uplot.data[1].filter((v) => v !== null))]"
    )
    assert top >= highest, f"the HBM axis tops out at {top} MB, below its line at {highest} MB"
    for range_ in ("live", "1h", "24h"):
        drawer.locator(f'[data-range="{range_}"]').click()
        expect(drawer.locator(f'[data-range="{range_}"]')).to_have_attribute("aria-pressed", "true")
        expect(drawer.locator(".chart .uplot canvas")).to_have_count(4)
        page.wait_for_timeout(500)
        for metric in ("util", "hbm_used", "power", "temp"):
            labels = drawer.locator(f'.chart[data-metric="{metric}"]').evaluate(AXIS_LABELS)
            for axis in labels:
                assert len(axis) == len(set(axis)), f"{range_} {metric}: repeated axis labels {axis}"


def test_benchmark_charts_label_each_tick_once_and_tables_fit(live_panel, running, panel_page):
    with live_panel.api("bob") as client:
        response = client.post(
            f"/api/v1/deployments/{running['id']}/benchmarks/",
            json={"concurrency": [1, 4], "prompt_len": 16, "output_len": 16, "requests": 4},
        )
        assert response.status_code == 202, response.text
        run = f"/api/v1/benchmarks/{response.json()['id']}/"
        done = lambda: client.get(run).json()["status"] == "succeeded"  # noqa: E731
        wait_until(done, 90, "the benchmark did not succeed")
    page = panel_page("charlie")
    page.goto(f"/deployments/benchmarks/?deployment={RUNNING[0]}")
    charts = page.locator("[data-bench-chart]")
    expect(charts.locator(".uplot").first).to_be_visible()
    for index in range(charts.count()):
        axes = charts.nth(index).evaluate(AXIS_LABELS)
        for labels in axes:
            assert len(labels) == len(set(labels)), f"repeated axis labels {labels}"
    for where in (f"/deployments/benchmarks/?deployment={RUNNING[0]}", f"/deployments/{RUNNING[0]}/"):
        page.goto(where)
        table = page.get_by_test_id("benchmark-table")
        expect(table.locator("tbody tr").first).to_be_visible()
        # At 1440 px every column shows: none sits past the right edge of the table's frame.
        clipped = table.evaluate(
            "t => t.getBoundingClientRect().right > t.closest('.table-wrap').clientWidth"
            " + t.closest('.table-wrap').getBoundingClientRect().left + 1"
        )
        assert not clipped, f"the benchmark table is clipped on the right of {where}"
