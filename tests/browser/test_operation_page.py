"""The operation page in a real browser: started from a node page, followed live to 100% without reload."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import REPO

COMPILED_CATALOG = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo"


def test_inventory_started_from_the_node_page_reaches_100_percent_live(panel_page):
    page = panel_page("bob")
    page.goto("/nodes/sim-a2/")
    page.get_by_test_id("run-inventory").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))
    # The page was rendered at the start; everything after comes over the websocket (or its back-fill).
    page.evaluate("window.__loadedOnce = true")

    expect(page.locator("[data-field=progress]")).to_have_text("100", timeout=30_000)
    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("[data-field=status]")).to_have_class(re.compile(r"\bstatus-ok\b"))
    expect(page.locator("[data-field=log] .log-line").first).to_be_visible()
    assert page.evaluate("window.__loadedOnce") is True, "the page reloaded instead of updating live"


def test_force_fail_goes_away_live_when_the_operation_ends(panel_page):
    page = panel_page("alice")  # an admin: the only role offered Force-fail
    page.goto("/nodes/sim-a2/")
    page.get_by_test_id("run-inventory").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))
    page.evaluate("window.__loadedOnce = true")

    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded", timeout=30_000)
    expect(page.locator("[data-field=force-fail]")).to_be_hidden()
    assert page.evaluate("window.__loadedOnce") is True, "the page reloaded instead of updating live"


# A summary of an older event batch, arriving after the end's: panel worker threads send them in any order.
STALE_SUMMARY = """
from panel.operations.models import Operation
from panel.operations.services import operation_summary
from panel.realtime.broadcast import broadcast_each, operation_group
operation = Operation.objects.get(pk="{operation}")
operation.status, operation.progress, operation.last_seq = "running", 55.0, 1
broadcast_each([(operation_group(operation.pk), operation_summary(operation))])
"""


def test_a_late_summary_of_an_older_batch_does_not_undo_the_end(panel_page, live_panel):
    page = panel_page("bob")
    page.goto("/nodes/sim-a2/")
    page.get_by_test_id("run-inventory").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))
    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded", timeout=30_000)
    operation = page.locator("#operation").get_attribute("data-operation")

    live_panel.manage("shell", "-c", STALE_SUMMARY.format(operation=operation))
    page.wait_for_timeout(1000)  # the message is on the page's socket within milliseconds of the send

    expect(page.locator("[data-field=progress]")).to_have_text("100")
    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded")


def test_operation_page_switches_to_chinese(panel_page):
    page = panel_page("bob")
    page.goto("/nodes/sim-a2/")
    page.get_by_test_id("run-inventory").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))

    page.select_option(".lang-switch select", "zh-hans")
    page.wait_for_load_state()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    assert re.search(r"/operations/[0-9a-f-]{36}/$", page.url), "the language switch left the operation page"
    if not COMPILED_CATALOG.exists():
        pytest.skip(f"{COMPILED_CATALOG} is not compiled yet; only the language switch was checked")
    expect(page.locator(".sidebar")).to_contain_text("节点")
    expect(page.locator(".card h2").filter(has_text="日志")).to_be_visible()


def test_a_chinese_operation_page_shows_live_stages_in_chinese(panel_page):
    if not COMPILED_CATALOG.exists():
        pytest.skip(f"{COMPILED_CATALOG} is not compiled yet")
    page = panel_page("bob")
    page.goto("/nodes/sim-a2/")
    page.select_option(".lang-switch select", "zh-hans")
    # The switch is a form post: clicking before its page arrived would cancel it (the run stays English).
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.get_by_test_id("run-inventory").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))
    page.evaluate("window.__loadedOnce = true")

    # The last stage arrives over the websocket after the page was rendered, in the page's language.
    expect(page.locator("[data-field=progress]")).to_have_text("100", timeout=30_000)
    expect(page.locator("[data-field=stage]")).to_have_text("盘点完成")
    assert page.evaluate("window.__loadedOnce") is True, "the page reloaded instead of updating live"
