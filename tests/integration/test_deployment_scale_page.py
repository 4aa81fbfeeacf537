"""The deployment page's Scale form and the Roll back page for a disaggregated deployment
(docs/serving-plane.md §1, issue 35): one count per role, posted through scale(); a refusal (no room, too
many) on that role's count in both languages; a plain deployment's single count as before; the Roll back
page naming the counts of the roles now and in the revision it goes back to; viewers refused."""

import pytest
from django.test import Client

from tests.integration.test_deployment_apply import client, npu_node, put, spec, tiny
from tests.integration.test_deployment_replicas import rows, settle
from tests.integration.test_deployment_roles import split, versions

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny", "versions"]  # fixtures used by name


def page_client(user, language: str = "en") -> Client:
    browser = Client()
    browser.force_login(user)
    browser.cookies["django_language"] = language
    return browser


@pytest.fixture
def chat(client, tiny, versions):
    """A serving 1P1D deployment."""
    assert put(client, "chat", split()).status_code == 201
    settle()
    return "chat"


def test_the_page_offers_one_count_per_role_and_scales_the_decode_role(bob, chat):
    from panel.deployments.models import Decision

    detail = page_client(bob).get("/deployments/chat/").content.decode()
    assert 'data-testid="scale-form"' not in detail  # the single count would be refused
    for role in ("prefill", "decode"):
        assert f'data-testid="scale-form-{role}"' in detail
        assert f'<input type="hidden" name="role" value="{role}">' in detail
    assert 'value="1" class="num" data-testid="scale-replicas-decode"' in detail

    answer = page_client(bob).post("/deployments/chat/scale/", {"role": "decode", "replicas": "2"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 2}
    assert {name: row.role for name, row in rows("chat").items()} == {
        "chat": "prefill",
        "chat-d1": "decode",
        "chat-d2": "decode",
    }
    scaled = Decision.objects.filter(deployment__name="chat", kind="scale_up").get()
    assert (scaled.role, scaled.figures["to"]) == ("decode", 2)
    after = page_client(bob).get("/deployments/chat/").content.decode()
    assert 'value="2" class="num" data-testid="scale-replicas-decode"' in after
    assert 'value="1" class="num" data-testid="scale-replicas-prefill"' in after


@pytest.mark.parametrize(
    ("language", "no_room", "too_many"),
    [
        ("en", "does not fit", "less than or equal to 16"),
        ("zh-hans", "放不下", "小于或者等于 16"),
    ],
)
def test_a_refused_scale_is_shown_on_that_roles_count_and_changes_nothing(
    bob, chat, language, no_room, too_many
):
    browser = page_client(bob, language)
    # Four NPUs on npu-a: the prefill holds one, so four decode engines do not fit.
    refused = browser.post("/deployments/chat/scale/", {"role": "decode", "replicas": "4"})
    assert refused.status_code == 400
    page = refused.content.decode()
    error = page[page.index('data-testid="scale-error-decode"') :].split("</ul>")[0]
    assert no_room in error, error
    assert 'data-testid="scale-error-prefill"' not in page
    assert 'value="4" class="num" data-testid="scale-replicas-decode" aria-invalid="true"' in page
    over = browser.post("/deployments/chat/scale/", {"role": "decode", "replicas": "17"}).content.decode()
    assert too_many in over[over.index('data-testid="scale-error-decode"') :].split("</ul>")[0]
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 1}
    assert sorted(rows("chat")) == ["chat", "chat-d1"]


def test_a_plain_deployment_keeps_its_single_count_and_its_refusal_message(bob, client, tiny):
    assert put(client, "plain", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()
    browser = page_client(bob)
    detail = browser.get("/deployments/plain/").content.decode()
    assert 'data-testid="scale-form"' in detail
    assert 'data-testid="scale-form-decode"' not in detail
    refused = browser.post("/deployments/plain/scale/", {"replicas": "5"}, follow=True)
    assert refused.redirect_chain[-1][0] == "/deployments/plain/"
    texts = [str(message) for message in refused.context["messages"]]
    assert texts == ["Replica 5 does not fit: npu-a has 0 free NPUs; 1 are asked for."]
    assert sorted(rows("plain")) == ["plain"]
    assert browser.post("/deployments/plain/scale/", {"replicas": "2"}).status_code == 302
    assert sorted(rows("plain")) == ["plain", "plain-r2"]
    rollback = browser.get("/deployments/plain/rollback/").content.decode()
    assert 'data-testid="rollback-counts"' not in rollback  # no roles either side: the page as before


def test_a_viewer_may_not_scale_a_role(charlie, chat):
    browser = page_client(charlie)
    detail = browser.get("/deployments/chat/").content.decode()
    assert 'data-testid="scale-form-decode"' not in detail
    assert browser.post("/deployments/chat/scale/", {"role": "decode", "replicas": "2"}).status_code == 403
    assert browser.get("/deployments/chat/scale/").status_code == 403
    assert browser.get("/deployments/chat/rollback/").status_code == 403
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 1}


@pytest.mark.parametrize(
    ("language", "now", "then", "revision_title"),
    [
        ("en", "prefill 1 · decode 2", "prefill 1 · decode 1", "Replicas in revision 1"),
        ("zh-hans", "预填充 1 · 解码 2", "预填充 1 · 解码 1", "修订 1 中的副本"),
    ],
)
def test_the_rollback_page_names_the_roles_counts_now_and_in_the_revision(
    bob, chat, language, now, then, revision_title
):
    browser = page_client(bob)
    assert browser.post("/deployments/chat/scale/", {"role": "decode", "replicas": "2"}).status_code == 302
    settle()
    browser.cookies["django_language"] = language
    previous = browser.get("/deployments/chat/rollback/").content.decode()
    assert f'data-testid="rollback-counts-now">{now}<' in previous
    assert f'data-testid="rollback-counts-then">{then}<' in previous
    chosen = browser.get("/deployments/chat/rollback/?to_revision=1").content.decode()
    assert revision_title in chosen
    assert f'data-testid="rollback-counts-then">{then}<' in chosen
    assert browser.post("/deployments/chat/rollback/?to_revision=1").status_code == 302
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 1}
