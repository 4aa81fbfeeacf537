"""A page's live socket is closed when its user is deactivated, and the page then goes to the sign-in page
instead of reconnecting forever (static/js/live.js on close code 4401)."""

import re

from playwright.sync_api import expect

# Its own user: deactivating one of the shared test users would break the tests that follow.
CREATE_DORA = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
user, _ = get_user_model().objects.get_or_create(username="dora")
user.is_active = True
user.set_password("dora-password")
user.save()
user.groups.set([Group.objects.get(name="viewer")])
"""
DEACTIVATE_DORA = """
from django.contrib.auth import get_user_model
user = get_user_model().objects.get(username="dora")
user.is_active = False
user.save()
"""


def test_deactivating_a_signed_in_user_sends_their_open_page_to_sign_in(live_panel, panel_page):
    live_panel.manage("shell", "-c", CREATE_DORA)
    page = panel_page(user="dora")
    page.goto("/")
    with page.expect_websocket(lambda ws: ws.url.endswith("/ws/")) as opened:
        page.reload()
    socket = opened.value
    socket.wait_for_event("framereceived")  # subscribed: the socket is live

    live_panel.manage("shell", "-c", DEACTIVATE_DORA)
    expect(page).to_have_url(re.compile(r"/accounts/login/"), timeout=30_000)
