"""Safeguards an admin clicks through: an operator's new package waits on the Packages page until an admin
approves it, a node's models roots are set on its settings page (a relative path is refused there), and a
joined node gets a new join command only when the admin ticks that its credential rotates."""

import hashlib

from playwright.sync_api import expect

NNAL = "Ascend-cann-nnal_9.9.RC1_linux-aarch64.run"
CONTENT = b"#!/bin/sh\necho nnal\n"


def test_an_operators_new_package_waits_until_an_admin_approves_it(live_panel, panel_page):
    operator = panel_page("bob")
    operator.goto("/provisioning/packages/")
    operator.set_input_files(
        "input[type=file]", files=[{"name": NNAL, "mimeType": "application/octet-stream", "buffer": CONTENT}]
    )
    operator.get_by_test_id("vendor-sha256").fill(hashlib.sha256(CONTENT).hexdigest())
    operator.get_by_test_id("upload-form").get_by_role("button", name="Upload").click()
    expect(operator.locator(".message")).to_contain_text("waiting for an admin's approval")
    expect(operator.get_by_test_id("packages")).to_contain_text("Awaiting approval")

    admin = panel_page("alice")
    admin.goto("/provisioning/packages/")
    row = admin.locator("tr.pending-replacement", has_text=hashlib.sha256(CONTENT).hexdigest())
    row.get_by_role("button", name="Approve").click()
    expect(admin.locator(".message")).to_contain_text("in use")
    expect(
        admin.locator("tr.pending-replacement", has_text=hashlib.sha256(CONTENT).hexdigest())
    ).to_have_count(0)
    stored = [
        p for p in live_panel.api("alice").get("/api/v1/packages/").json()["results"] if p["name"] == NNAL
    ]
    assert stored[0]["sha256"] == hashlib.sha256(CONTENT).hexdigest()


def test_an_admin_sets_a_nodes_models_roots_on_its_settings_page(live_panel, panel_page):
    page = panel_page("alice")
    page.goto("/nodes/sim-a2/settings/")
    roots = page.locator("#id_models_roots")
    roots.fill("models")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".failure, .errorlist")).to_contain_text("not an absolute path")

    original = live_panel.api("alice").get("/api/v1/nodes/sim-a2/").json()["models_roots"]
    page.locator("#id_models_roots").fill("\n".join([*original, "/srv/models/../extra"]))
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".message")).to_contain_text("saved")
    assert live_panel.api("alice").get("/api/v1/nodes/sim-a2/").json()["models_roots"] == [
        *original,
        "/srv/extra",
    ]
    live_panel.api("alice").patch("/api/v1/nodes/sim-a2/", json={"models_roots": original})


def test_a_joined_node_gets_a_new_join_command_only_when_the_admin_says_it_rotates(live_panel, panel_page):
    with live_panel.api("alice") as api:
        token = (
            api.post("/api/v1/nodes/", json={"name": "npu-rejoin"}).raise_for_status().json()["join_token"]
        )
        api.post("/nodes/agent/join/", json={"node": "npu-rejoin", "token": token}).raise_for_status()
    page = panel_page("alice")
    page.goto("/nodes/npu-rejoin/")
    page.get_by_test_id("rejoin").click()
    page.get_by_test_id("rejoin-submit").click()
    expect(page.locator(".message")).to_contain_text("new credential")
    expect(page.get_by_test_id("join-command")).to_have_count(0)

    page.get_by_test_id("rejoin").click()
    page.get_by_test_id("rotate-credential").check()
    page.get_by_test_id("rejoin-submit").click()
    expect(page.get_by_test_id("join-command")).to_contain_text("--node npu-rejoin")
    with live_panel.api("alice") as api:
        api.delete("/api/v1/nodes/npu-rejoin/").raise_for_status()
