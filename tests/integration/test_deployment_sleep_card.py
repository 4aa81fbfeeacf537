"""The deployment page's Sleep card (issue 36 item 2), in English and 简体中文: asleep or awake and the last
wake, Sleep / Wake buttons for operators only, the fragment its script fetches again on each decision; no
card for a deployment that cannot sleep."""

import pytest
from django.test import Client

from tests.integration.test_deployment_idle import client, nodes, put, spec, tiny  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def page_client(user, language="en") -> Client:
    browser = Client(headers={"accept-language": language})
    browser.force_login(user)
    browser.cookies["django_language"] = language
    return browser


@pytest.mark.parametrize(
    ("language", "awake", "asleep", "button"),
    [("en", "Awake", "Asleep", "Sleep now"), ("zh-hans", "已唤醒", "休眠中", "立即休眠")],
)
@pytest.mark.usefixtures("_wired_to_redis")
def test_the_page_shows_asleep_or_awake_and_refetches_the_card(
    bob, charlie, client, tiny, language, awake, asleep, button  # noqa: F811
):  # fmt: skip
    from panel.deployments import sleep_state
    from panel.deployments.models import Deployment

    assert put(client, "sleepy", spec(state="stopped")).status_code == 201
    deployment = Deployment.objects.get(name="sleepy")
    sleep_state.forget(deployment.pk)
    page = page_client(bob, language).get("/deployments/sleepy/").content.decode()
    assert 'data-testid="sleep"' in page
    assert 'data-state="awake"' in page
    assert awake in page
    assert button in page
    assert "js/sleep_box.js" in page
    assert button not in page_client(charlie, language).get("/deployments/sleepy/").content.decode()

    sleep_state.mark_asleep(deployment.pk, 2)
    card = page_client(charlie, language).get("/deployments/sleepy/sleep-box/").content.decode()
    assert 'data-state="asleep"' in card
    assert asleep in card
    sleep_state.forget(deployment.pk)


def test_a_deployment_that_cannot_sleep_has_no_sleep_card(bob, client, tiny):  # noqa: F811
    assert put(client, "plain", spec(idle=None, state="stopped")).status_code == 201
    assert 'data-testid="sleep"' not in page_client(bob).get("/deployments/plain/").content.decode()
