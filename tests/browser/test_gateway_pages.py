"""Keys and usage in the browser: an inference key with a model list and a limit made on the settings page
(shown once, listed with its scopes), and the usage page's charts drawn from the hourly sums."""

from playwright.sync_api import expect

ADD_USAGE = """
from datetime import timedelta
from django.utils import timezone
from panel.gateway.models import UsageHour
hour = timezone.now().replace(minute=0, second=0, microsecond=0)
for back, (key, model, tokens) in enumerate([("alice/app", "qwen", 1200), ("alice/app", "deepseek", 300),
                                            ("bob/batch", "qwen", 5000)]):
    UsageHour.objects.get_or_create(
        hour=hour - timedelta(hours=back), key=key, model=model, deployment_name=model,
        defaults={"requests": 3, "errors": 1, "prompt_tokens": tokens, "completion_tokens": tokens // 2},
    )
"""


def test_an_inference_key_is_made_with_its_models_and_limit_and_listed(panel_page):
    page = panel_page("bob")
    page.goto("/accounts/settings/#tokens")
    form = page.get_by_test_id("token-form")
    form.locator("#id_name").fill("browser-app")
    expect(form.locator("input[name=scopes][value=inference]")).to_be_checked()
    form.locator("#id_models").fill("tiny-qwen-browser")
    form.locator("#id_requests_per_minute").fill("20")
    form.get_by_role("button").click()
    expect(page.locator("[data-new-token] code")).to_contain_text("ap_")
    row = page.get_by_test_id("token-table").locator("tr[data-token=browser-app]")
    expect(row).to_contain_text("inference")
    expect(row).to_contain_text("tiny-qwen-browser")
    expect(row).to_contain_text("20")


def test_the_usage_page_draws_tokens_per_model_and_per_key(live_panel, panel_page):
    live_panel.manage("shell", "-c", ADD_USAGE)
    page = panel_page("alice")
    page.goto("/usage/?range=7d")
    expect(page.locator("[data-chart=models] .uplot")).to_be_visible()
    expect(page.locator("[data-chart=keys] .uplot")).to_be_visible()
    keys = page.get_by_test_id("usage-keys")
    expect(keys.locator("tbody tr").first).to_contain_text("bob/batch")  # the most tokens first
    expect(page.get_by_test_id("usage-totals")).to_contain_text("9")  # requests of the three hours
    with page.expect_download() as download:
        page.get_by_test_id("usage-csv").click()
    assert download.value.suggested_filename.startswith("usage-7d-")
