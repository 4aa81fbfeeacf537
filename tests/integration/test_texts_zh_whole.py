"""Texts a 简体中文 page showed in English because they reached it in pieces: a compatibility hint made of
two sentences, a chip recipe's title and reason filled into a translated planner template, the model page's
verification figure. Each now reads in Chinese."""

import pytest
from django.test import Client
from django.utils import translation

from panel.catalog.models import Model, ModelArtifact
from panel.core.templatetags.panel_text import reason_text
from panel.nodes.models import Node
from panel.operations.texts import agent_text
from workers.ascend.compat import check
from workers.ascend.diagnose import diagnose
from workers.engine.launch.recipes import RecipeContext, apply_recipes, recipe_items

pytestmark = pytest.mark.django_db


def test_a_chip_an_older_release_does_not_list_reads_whole_in_chinese():
    (problem,) = check(vllm_ascend="0.7.3", chip="a3").problems
    assert "Releases that do:" in problem.hint

    with translation.override("zh-hans"):
        shown = agent_text(problem.hint)

    assert "Releases that do" not in shown
    assert "支持它的版本" in shown


def test_the_310p_recipe_notes_read_in_chinese_in_the_planner_notes():
    items = recipe_items(RecipeContext(chip="310p", family="qwen", vllm_ascend="0.11.0"))
    notes = [r.as_dict() for r in apply_recipes(items, {}, "0.11.0").reasons if r.code == "recipe_note"]
    assert notes

    with translation.override("zh-hans"):
        shown = [reason_text(note) for note in notes]

    assert not [text for text in shown if "float16 only" in text or "eager mode" in text], shown
    assert any("float16" in text and "只支持" in text for text in shown), shown


def test_the_verification_figure_on_the_model_page_reads_in_chinese(alice):
    model = Model.objects.create(name="qwen-w8a8", source="local")
    node = Node.objects.create(name="a2", address="127.0.0.1")
    verification = {"passed": True, "max_relative_error": 0.00123}
    ModelArtifact.objects.create(
        model=model, node=node, path="/data/models/q", ready=True, verification=verification
    )
    client = Client()
    client.force_login(alice)
    client.cookies["django_language"] = "zh-hans"

    html = client.get(f"/models/{model.pk}/").content.decode()

    assert "最大误差 0.00123" in html
    assert "max err" not in html


def test_a_too_small_hccl_buffer_hint_reads_in_chinese_with_its_figures():
    (finding,) = diagnose("[MoeDistributeDispatchV2] NEEDED_HCCL_BUFFSIZE(...) = 294MB, HCCL_BUFFSIZE=200MB.")

    with translation.override("zh-hans"):
        shown = agent_text(finding["hint"])

    assert "HCCL_BUFFSIZE=294" in shown
    assert "200 MB" in shown
    assert "请在每个节点上" in shown
