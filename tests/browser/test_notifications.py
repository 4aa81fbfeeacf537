"""An admin sets up a webhook channel on the Notifications page, presses Test, and sees the delivery
recorded, in English and in 简体中文; the receiver (a real server on 127.0.0.1) got it with the bearer token
typed into the form, which the page never shows again."""

import pytest

from tests.notify_receivers import Receiver

WORDS = {
    "en": {"heading": "Notifications", "sent": "Test notification sent to", "status": "Sent"},
    "zh-hans": {"heading": "通知", "sent": "测试通知已发送到", "status": "已发送"},
}


@pytest.fixture
def receiver():
    made = Receiver("webhook", "browser-token")
    yield made
    made.close()


@pytest.mark.parametrize("locale", ["en", "zh-hans"])
def test_an_admin_adds_a_webhook_channel_and_tests_it(panel_page, receiver, locale):
    words, name = WORDS[locale], f"hook-{locale}"
    page = panel_page(user="alice", locale=locale)
    page.click("nav.sidebar a[href='/alerts/notifications/']")
    page.wait_for_url("**/alerts/notifications/")
    assert page.locator("h1").first.inner_text().strip() == words["heading"]

    form = page.locator("[data-testid=channel-form]")
    form.locator("#id_name").fill(name)
    form.locator("#id_kind").select_option("webhook")
    form.locator("#id_url").fill(receiver.url())
    form.locator("#id_secret").fill("browser-token")
    form.locator("[data-testid=add-channel]").click()
    page.wait_for_url("**/alerts/notifications/")
    row = page.locator(f"tr[data-channel='{name}']")
    assert row.count() == 1
    assert "browser-token" not in page.content()

    page.click(f"[data-testid=test-{name}]")
    page.wait_for_url("**/alerts/notifications/")
    assert words["sent"] in page.locator("body").inner_text()
    delivery = page.locator("[data-testid=deliveries] tr[data-status=sent]", has_text=name).first
    assert words["status"] in delivery.inner_text()
    assert len(receiver.taken()) == 1
    assert receiver.taken()[0]["body"]["event"] == "test"


def test_a_viewer_has_no_notifications_link_and_is_refused_the_page(panel_page):
    page = panel_page(user="charlie")
    assert page.locator("nav.sidebar a[href='/alerts/notifications/']").count() == 0
    answer = page.goto("/alerts/notifications/")
    assert answer.status == 403
