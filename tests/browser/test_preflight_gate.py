"""The preflight gate in a real browser, in English and 简体中文: a preflight with a failed row blocks the
install (the page says how many failed and what to fix), an admin overrides the row with a reason, and
the install runs with the override shown and audited."""

import re

from playwright.sync_api import expect

from tests.browser.conftest import wait_until

# CANN 8.1.RC1 on sim-a2: no driver step. Its toolkit is taken out of the store, so the overridden install
# stops at its first step, before it changes the host the next tests install on.
PROFILE = "0.7.3"
HIDE_TOOLKIT = """
from panel.provisioning.models import PackageFile
from workers.steps.packages import package_filename
PackageFile.objects.filter(name=package_filename("toolkit", "8.1.RC1")).delete()
"""


def preflight_ended(api, before) -> bool:
    stack = api.get("/api/v1/node-stacks/sim-a2/").json()
    if stack["preflight_operation"] in (None, before):
        return False
    operation = api.get(f"/api/v1/operations/{stack['preflight_operation']}/").json()
    return operation["status"] in ("succeeded", "failed", "cancelled")


def install_blocked(page):
    page.get_by_test_id("run-install").click()
    page.get_by_test_id("confirm-dialog").get_by_test_id("confirm-ok").click()
    page.wait_for_load_state()


def test_a_failed_preflight_blocks_the_install_until_an_admin_overrides_it(live_panel, panel_page):
    live_panel.manage("seed_sim_packages")
    live_panel.manage("shell", "-c", HIDE_TOOLKIT)
    try:
        page = panel_page("alice")
        page.goto("/provisioning/nodes/sim-a2/")
        page.select_option("#id_profile", PROFILE)
        with live_panel.api("alice") as api:
            before = api.get("/api/v1/node-stacks/sim-a2/").json()["preflight_operation"]
            page.get_by_test_id("run-preflight").click()
            wait_until(lambda: preflight_ended(api, before), 180, "the preflight of 0.7.3 to end")
        page.goto("/provisioning/nodes/sim-a2/")
        failed_row = page.locator("[data-testid=checklist] tr[data-check=packages][data-result=fail]")
        expect(failed_row).to_be_visible()
        expect(page.get_by_test_id("preflight-failed")).to_contain_text("1 failed")
        expect(failed_row).to_contain_text("Upload them to the Package store.")  # what to fix

        install_blocked(page)
        expect(page.locator(".messages, .message, [role=alert]").first).to_contain_text(
            "1 preflight check failed for 0.7.3: the install is blocked."
        )
        assert "?operation=" not in page.url

        zh = panel_page("alice", locale="zh-hans")
        zh.goto("/provisioning/nodes/sim-a2/")
        expect(zh.get_by_test_id("preflight-failed")).to_contain_text("1 项失败")
        expect(zh.get_by_test_id("preflight-failed")).to_contain_text("安装将被阻止")
        expect(zh.get_by_test_id("override-packages")).to_have_attribute("placeholder", "仍然安装的理由")
        install_blocked(zh)
        expect(zh.locator(".messages, .message, [role=alert]").first).to_contain_text("有 1 项预检未通过")

        page.goto("/provisioning/nodes/sim-a2/")
        page.get_by_test_id("override-packages").fill("the toolkit comes from the site mirror")
        page.get_by_test_id("run-install").click()
        page.get_by_test_id("confirm-dialog").get_by_test_id("confirm-ok").click()
        page.wait_for_url(re.compile(r"\?operation="))
        expect(page.get_by_test_id("install-overrides")).to_contain_text(
            "the toolkit comes from the site mirror"
        )
        zh.goto(page.url)
        expect(zh.get_by_test_id("install-overrides")).to_contain_text("已由管理员豁免")

        with live_panel.api("alice") as api:
            entries = api.get("/api/v1/audit/", params={"action": "install.preflight_overridden"}).json()
            assert entries["results"][0]["details"]["overrides"] == {
                "packages": "the toolkit comes from the site mirror"
            }
            wait_until(
                lambda: api.get("/api/v1/node-stacks/sim-a2/").json()["status"] != "installing",
                120,
                "the overridden install to end",
            )
    finally:
        live_panel.manage("seed_sim_packages")
