"""Small things a new admin sees first: the tab shows the panel's icon (served from static, no CDN), and
the login form's two fields have the same width (both styled as text fields)."""

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db


def test_every_page_names_the_vendored_favicon_and_favicon_ico_leads_to_it():
    page = Client().get("/accounts/login/").content.decode()
    link = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page)
    assert link, "base.html names no icon"
    assert link.group(1).endswith("favicon.svg")
    assert finders.find("favicon.svg"), "static/favicon.svg is missing"
    response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == link.group(1)


def test_the_login_fields_are_both_typed_text_fields():
    page = Client().get("/accounts/login/").content.decode()
    assert re.search(r'<input id="id_username" name="username" type="text"', page)
    assert re.search(r'<input id="id_password" name="password" type="password"', page)
