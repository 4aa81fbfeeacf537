"""Every page carries the statuses, colours and terminal sets of panel/core/domain/choices.py for its scripts
(static/js/choices.js reads them): what the page serves is what choices.py says, labels in its language."""

import json
import re

import pytest
from django.test import Client

from panel.core.domain.choices import DeploymentState, NpuHealth, OperationStatus, StepState

pytestmark = pytest.mark.django_db


def served_choices(user, language: str) -> dict:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    page = client.get("/operations/").content.decode()
    (script,) = re.findall(r'<script id="panel-choices" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(script)


def test_the_page_serves_the_colours_and_sets_choices_py_defines(charlie):
    served = served_choices(charlie, "en")
    assert served["operation"]["colours"] == OperationStatus.COLOURS
    assert set(served["operation"]["ended"]) == OperationStatus.TERMINAL
    assert served["deployment"]["colours"] == DeploymentState.COLOURS
    assert set(served["deployment"]["settled"]) == DeploymentState.SETTLED
    assert served["npu_health"]["colours"] == NpuHealth.COLOURS
    assert served["step"]["colours"] == StepState.COLOURS
    assert served["operation"]["labels"]["cancelled"] == "Cancelled"


def test_the_labels_come_in_the_viewers_language(charlie):
    served = served_choices(charlie, "zh-hans")
    assert served["operation"]["colours"] == OperationStatus.COLOURS
    assert served["operation"]["labels"]["failed"] != "Failed"
    assert served["step"]["labels"]["skipped"] != "already done"
