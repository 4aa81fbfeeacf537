"""Every page shows a moment the same way: `|when` writes a <time> with its ISO 8601 value that
static/js/page.js puts in the viewer's locale, the server's short format as the text without JavaScript,
and a dash for nothing."""

from datetime import UTC, datetime

from panel.core.templatetags.panel_time import when

MOMENT = datetime(2026, 12, 4, 19, 9, 52, tzinfo=UTC)


def test_a_moment_is_a_time_element_with_its_iso_value():
    html = str(when(MOMENT))
    assert html.startswith('<time datetime="2026-12-04T19:09:52+00:00">')
    assert html.endswith("</time>")


def test_a_shape_is_passed_to_the_page_script():
    assert 'data-format="relative"' in str(when(MOMENT, "relative"))


def test_nothing_is_a_dash():
    assert when(None) == "—"
