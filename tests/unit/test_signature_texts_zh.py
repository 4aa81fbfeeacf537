"""Every diagnose title and hint reaches a Chinese viewer translated: the panel looks each English text up
in the compiled catalog (panel.operations.texts.agent_text), so a text without its msgid shows in English."""

import gettext
from pathlib import Path

import pytest

from workers.ascend.signatures import SIGNATURES

LOCALE = Path(__file__).resolve().parents[2] / "locale"


@pytest.fixture(scope="module")
def chinese():
    return gettext.translation("django", localedir=LOCALE, languages=["zh_Hans"])


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: s.code)
def test_title_and_hint_are_in_the_chinese_catalog(signature, chinese):
    for text in (signature.title, signature.hint, signature.npu_hint, signature.figured_hint):
        if text:
            assert chinese.gettext(text) != text, text[:60]
