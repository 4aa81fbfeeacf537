"""Every page carries the Content-Security-Policy and the other security headers, and no page holds what
that policy would refuse: no inline script (json_script data blocks are data), no inline event handler, no
javascript: URL. Walked over every URL the panel resolves (tests/url_walk.py), as an admin, so a page
added tomorrow is covered."""

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from panel.core.web.security_headers import CONTENT_SECURITY_POLICY
from tests.url_walk import TOKEN_GUARDED, every_url

pytestmark = pytest.mark.django_db

EXPECTED = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class ScriptsAndHandlers(HTMLParser):
    def __init__(self):
        super().__init__()
        self.problems: list[str] = []
        self._inline = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=…>")
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith("javascript:"):
                self.problems.append(f"<{tag} {name}=javascript:…>")
        data_block = attributes.get("type") == "application/json"
        self._inline = tag == "script" and "src" not in attributes and not data_block

    def handle_data(self, data):
        if self._inline and data.strip():
            self.problems.append(f"inline <script>: {data.strip()[:60]!r}")

    def handle_endtag(self, tag):
        if tag == "script":
            self._inline = False


def test_every_page_carries_the_headers_and_nothing_the_policy_would_refuse(rows, alice):
    client = Client()
    client.force_login(alice)
    checked, problems = 0, {}
    for name, url in every_url(rows):
        if name in TOKEN_GUARDED:
            continue
        response = client.get(url)
        for header, value in EXPECTED.items():
            assert response.get(header) == value, (url, header, response.get(header))
        if response.status_code == 200 and response["Content-Type"].startswith("text/html"):
            parser = ScriptsAndHandlers()
            parser.feed(response.content.decode())
            if parser.problems:
                problems[url] = parser.problems
            checked += 1
    assert checked >= 25  # the pages, not only the API
    assert problems == {}


def test_the_api_docs_script_comes_from_the_panel_not_inline(alice):
    client = Client()
    client.force_login(alice)
    page = client.get("/api/docs/")
    assert page.status_code == 200
    script = re.search(r'<script src="([^"]*script[^"]*)"', page.content.decode())
    assert script is not None
    answer = client.get(script.group(1).replace("&amp;", "&"))
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("application/javascript")
