"""The models pages in a real browser against the live panel and the sim-a2 agent: register a folder that
is on the node, see its inspected facts, convert it to W8A8_DYNAMIC and watch the progress reach 100 %."""

import re
import uuid

from playwright.sync_api import expect

from workers.models.tiny import make_tiny_model


def test_register_inspect_and_quantize_a_model_on_a_node(live_panel, panel_page):
    name = f"tiny-{uuid.uuid4().hex[:6]}"
    make_tiny_model(live_panel.sim_root("sim-a2") / "data" / "models" / name, arch="qwen2")
    live_panel.wait_for_node_online("sim-a2")
    page = panel_page(user="bob")

    page.goto("/models/register/")
    page.select_option("#id_source", "local")
    page.select_option("#id_node", label="sim-a2")
    page.fill("#id_path", f"/data/models/{name}")
    page.fill("#id_name", name)
    page.click("[data-testid=register-form] button[type=submit]")
    page.wait_for_url(re.compile(r"/operations/"))
    expect(page.locator("[data-field=status]")).to_have_text(re.compile("Succeeded"), timeout=60_000)

    page.goto("/models/")
    page.click(f"[data-model={name}] a")
    expect(page.locator("[data-fact=architecture]")).to_have_text("Qwen2ForCausalLM")
    expect(page.locator("[data-testid=artifacts]")).to_contain_text(f"/data/models/{name}")

    page.click("[data-testid=convert-menu]")
    # The open menu draws above the rows, table headers and cards below it: every corner of it is its own.
    covered = page.get_by_test_id("convert-form").evaluate(
        """form => {
            form.scrollIntoView({ block: "center" });
            const r = form.getBoundingClientRect();
            const corners = [[r.left + 2, r.top + 2], [r.right - 2, r.top + 2], [r.left + 2, r.bottom - 2],
                             [r.right - 2, r.bottom - 2], [r.left + r.width / 2, r.bottom - 2]];
            return corners.filter(([x, y]) => !form.contains(document.elementFromPoint(x, y))).length;
        }"""
    )
    assert covered == 0, "the Convert menu is drawn under what follows it"
    page.select_option("[data-testid=convert-form] select[name=target]", "w8a8_dynamic")
    page.click("[data-testid=convert-form] button[type=submit]")
    page.wait_for_url(re.compile(r"/operations/"))
    expect(page.locator("[data-field=progress]")).to_have_text("100", timeout=120_000)
    expect(page.locator("[data-field=status]")).to_have_text(re.compile("Succeeded"))

    page.goto("/models/")
    page.click(f"[data-model={name}] a")
    expect(page.locator("[data-testid=artifacts] [data-format=w8a8_dynamic]")).to_contain_text(f"{name}-w8a8")


def test_the_register_form_shows_only_the_chosen_sources_fields(live_panel, panel_page):
    page = panel_page(user="bob")
    page.goto("/models/register/")
    repo, path = page.locator("#id_repo_id"), page.locator("#id_path")
    page.select_option("#id_source", "modelscope")
    expect(repo).to_be_visible()
    expect(path).to_be_hidden()
    page.select_option("#id_source", "local")
    expect(path).to_be_visible()
    expect(repo).to_be_hidden()
    expect(page.locator("#id_revision")).to_be_disabled()
    expect(page.locator("#id_node")).to_be_visible()  # every source may use a node
