"""Agents send each text a person reads as English plus its msgid and params (workers.i18n), so the panel
translates the template and fills it, instead of guessing the template back from the English."""

import json

import yaml

from workers.contracts import OperationEventMessage, utcnow
from workers.i18n import gettext_noop as _
from workers.i18n import join_lines, message_of, structured, with_texts
from workers.steps.base import StepFailed
from workers.tasks.deploy_launch import LaunchFailed


def msgids(structure) -> set[str]:
    nested = [msgids(value) for value in structure["params"].values() if isinstance(value, dict)]
    return {structure["msgid"]}.union(*nested)


def test_a_filled_template_reads_as_english_and_keeps_its_msgid_and_only_its_own_params():
    text = _("port {port} is already in use on this node").format(port=8000, unrelated="x")
    assert text == "port 8000 is already in use on this node"
    assert structured(text) == {
        "msgid": "port {port} is already in use on this node",
        "params": {"port": 8000},
    }


def test_a_value_that_is_itself_a_text_is_nested_and_a_plain_value_is_not():
    error = StepFailed("cann_toolkit", _("finished, but its result is not there (check still fails)"))
    assert structured(message_of(error)) == {
        "msgid": "step {step}: {message}",
        "params": {
            "step": "cann_toolkit",
            "message": {"msgid": "finished, but its result is not there (check still fails)", "params": {}},
        },
    }


def test_texts_joined_by_plus_or_by_lines_stay_structured_part_by_part():
    hint = _("{profile} does not list {chip}.").format(profile="p", chip="A3")
    hint += " " + _("Releases that do: {names}.").format(names="a, b")
    assert hint == "p does not list A3. Releases that do: a, b."
    assert {"{profile} does not list {chip}.", "Releases that do: {names}."} <= msgids(structured(hint))
    lines = join_lines([_("Upload the driver and firmware packages."), "a line of the log"])
    assert structured(lines) == {
        "msgid": "{p0}\n{p1}",
        "params": {
            "p0": {"msgid": "Upload the driver and firmware packages.", "params": {}},
            "p1": "a line of the log",
        },
    }


def test_a_plain_string_has_no_structure_and_an_exceptions_message_keeps_its_own():
    assert structured("written without a msgid") is None
    assert structured(message_of(ValueError("plain"))) is None
    failed = LaunchFailed(_("the model folder {path} does not exist on this node").format(path="/m"))
    assert structured(message_of(failed))["params"] == {"path": "/m"}


def test_an_event_carries_its_texts_beside_the_english_fields_through_the_contract():
    stage = _("Installing {name}").format(name="vllm")
    payload = with_texts(
        {
            "state": "failed",
            "error": _("Done."),
            "stage": stage,
            "steps": [{"name": "a", "title": stage}],
            "line": stage,
        }
    )
    message = OperationEventMessage(seq=1, time=utcnow(), kind="state", payload=payload)
    sent = json.loads(json.dumps(message.model_dump(mode="json")))["payload"]
    assert sent["stage"] == "Installing vllm"
    assert sent["texts"] == {
        "error": {"msgid": "Done.", "params": {}},
        "stage": {"msgid": "Installing {name}", "params": {"name": "vllm"}},
    }
    assert sent["steps"][0]["texts"]["title"]["msgid"] == "Installing {name}"
    assert "line" not in sent["texts"]  # a log line is the engine's or a tool's words, never translated


def test_a_text_is_written_to_yaml_as_the_plain_string_it_is():
    document = {"stage": _("Installing {name}").format(name="vllm"), "hint": _("Done.")}
    assert yaml.safe_dump(document) == "hint: Done.\nstage: Installing vllm\n"
