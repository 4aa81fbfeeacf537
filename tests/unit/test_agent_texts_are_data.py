"""No agent- or engine-sent string is ever a format string (panel.core.domain.translated.safe_format): a
checklist line's `templates`, an operation text's msgid or a fabric check's detail fill plain `{name}` fields
and a number's precision, nothing else; a hostile one shows as its fallback instead of reading attributes or
asking for a gigabyte."""

import pytest

from panel.core.domain.translated import filled, safe_format


def test_plain_fields_and_a_numbers_precision_are_filled():
    assert safe_format("{node} did not answer within {seconds:.0f} s", {"node": "n1", "seconds": 9.6}) == (
        "n1 did not answer within 10 s"
    )


@pytest.mark.parametrize(
    "template",
    [
        "{p.__class__.__init__.__globals__}",
        "{p[0]}",
        "{p!r}",
        "{p:>999999999}",
        "{p:{q}}",
        "{0}",
        "{}",
        "{seconds:>20.0f}",
    ],
)
def test_anything_but_a_plain_field_is_refused(template):
    with pytest.raises((ValueError, KeyError, IndexError)):
        safe_format(template, {"p": "x", "q": "10", "seconds": 1.0})


def test_a_text_that_grows_past_its_bound_is_refused():
    with pytest.raises(ValueError, match="grows"):
        safe_format("{p}" * 100, {"p": "x" * 1000})


def test_an_agents_checklist_template_shows_its_fallback_instead_of_the_panels_internals():
    hostile = "{p.__class__.__mro__}"
    assert filled(hostile, {"p": "x"}, fallback="as the agent wrote it") == "as the agent wrote it"
    assert filled("{p:>999999999}", {"p": "x"}, fallback="as the agent wrote it") == "as the agent wrote it"


def test_an_operation_text_with_a_hostile_msgid_shows_the_msgid_unfilled():
    from panel.operations.texts import english

    structure = {"msgid": "{step.__class__}", "params": {"step": "install"}}
    assert english(structure) == "{step.__class__}"


def test_a_deployment_reason_part_from_an_agent_shows_as_it_came():
    from panel.deployments.reasons import english, part

    assert english([part("{x:>999999999}", x=1), part("{missing}", x=1)]) == "{x:>999999999} {missing}"
