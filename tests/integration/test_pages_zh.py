"""Every page, opened in 简体中文, shows no English UI text: each page the URL walker finds (top-level pages
and detail pages of a small world with an install, a quantization and a finished benchmark) is rendered for
an admin who chose zh-hans, and its visible text (text nodes, titles, placeholders, options; names, paths
and logs in monospace left out) must hold no catalog msgid shown as is and no run of English words."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from panel.core.domain.choices import OperationKind, OperationStatus
from tests.integration.conftest import event_batch, ingest_as_its_node
from tests.url_walk import PUBLIC, TOKEN_GUARDED, every_url

pytestmark = pytest.mark.django_db
PO = Path(__file__).resolve().parents[2] / "locale/zh_Hans/LC_MESSAGES/django.po"
# Inside these, text is data (names, paths, commands, logs), not UI.
DATA_CLASSES = {"mono", "log", "num"}
DATA_TAGS = {"script", "style", "pre", "code", "kbd", "samp"}
SHOWN_ATTRIBUTES = ("title", "placeholder", "aria-label", "alt")
# Words that stay English in a Chinese UI: product, chip and tool names, units, protocols.
TERMS = {
    "npu", "npus", "hbm", "ddr", "cpu", "gpu", "vllm", "vllm-ascend", "ascend", "cann", "atc", "onnx", "om",
    "nnal", "atb", "ssh", "api", "http", "https", "ok", "id", "gb", "mb", "kb", "gib", "mib", "tp", "dp",
    "kv", "moe", "mla", "w8a8", "w8a8_dynamic", "safetensors", "hugging", "face", "huggingface",
    "modelscope", "openai", "json", "yaml", "url", "uri", "sha-256", "numa", "pip", "torch", "torch-npu",
    "triton", "msmodelslim", "rsync", "npu-smi", "ascend-panel", "panel", "prometheus", "openapi",
    "swagger", "redoc", "uplot", "qwen", "deepseek", "llama", "linux", "aarch64", "x86_64", "kunpeng",
    "atlas", "duo", "pro", "a2", "a3", "utc", "ttft", "tpot", "tok", "s", "ms", "w", "c", "v1", "acl",
    "fp16", "bf16", "int8", "dtype", "lora", "ir", "opset", "hdk", "cli", "curl", "sudo", "systemd",
    "ai", "core", "python", "wheel", "authorization", "bearer", "token",
}  # fmt: skip
# Single words a Chinese page must not show as they are (statuses, mostly).
KNOWN_ENGLISH = {
    "succeeded", "failed", "pending", "running", "cancelled", "stopped", "stopping", "starting", "ready",
    "passed", "done", "skipped", "unhealthy", "online", "offline", "installed", "yes", "no", "none", "path",
}  # fmt: skip
ENGLISH_RUN = re.compile(r"[A-Za-z][A-Za-z'’-]+(?:[ ,.;:]+[A-Za-z][A-Za-z'’-]+)+")


def english_msgids() -> set[str]:
    """Catalog msgids whose Chinese differs from (or is missing for) the English: seen as is on a zh page,
    they were not translated."""
    text = PO.read_text(encoding="utf-8")
    found = set()
    for msgid, msgstr in re.findall(r'\nmsgid "((?:[^"\\]|\\.)*)"\nmsgstr "((?:[^"\\]|\\.)*)"\n', text):
        if len(msgid) > 3 and msgstr != msgid and "%" not in msgid and "{" not in msgid:
            found.add(msgid.replace('\\"', '"'))
    return found


class VisibleText(HTMLParser):
    """Visible text segments of a page, with the data inside DATA_TAGS / DATA_CLASSES left out."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}

    def __init__(self):
        super().__init__()
        self.stack: list[bool] = []  # per open element: is it data?
        self.segments: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        inside_data = any(self.stack)
        classes = set((attributes.get("class") or "").split())
        is_data = tag in DATA_TAGS or bool(classes & DATA_CLASSES) or "data-raw" in attributes
        if not inside_data and not is_data:
            for name in SHOWN_ATTRIBUTES:
                if attributes.get(name):
                    self.segments.append(attributes[name])
            if tag == "input" and attributes.get("type") in ("submit", "button") and attributes.get("value"):
                self.segments.append(attributes["value"])
        if tag not in self.VOID:
            self.stack.append(is_data)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not any(self.stack) and data.strip():
            self.segments.append(" ".join(data.split()))


def english_left(html: str, msgids: set[str], names: set[str]) -> list[str]:
    parser = VisibleText()
    parser.feed(html)
    left = []
    for segment in parser.segments:
        if segment in msgids or segment.lower() in KNOWN_ENGLISH:
            left.append(segment)
            continue
        for run in ENGLISH_RUN.findall(segment):
            words = [w.lower().strip("'’-") for w in re.split(r"[ ,.;:]+", run) if w]
            if sum(1 for w in words if w not in TERMS and w not in names) >= 2:
                left.append(segment)
                break
    return left


@pytest.fixture
def world_with_history(rows, alice):
    """Rows whose pages show agent texts: an install with its plan and steps, a quantization, a finished
    benchmark."""
    from panel.catalog.models import ModelArtifact
    from panel.operations.models import Operation
    from panel.provisioning.models import NodeStack

    node, model = rows["node"], rows["model"]
    model.source = "local"  # the walker's row carries a source no form offers
    model.save()
    rows["deployment"].nodes.add(node)  # serving there: the provisioning page warns before installs
    install = Operation.objects.create(kind=OperationKind.INSTALL, node=node, target=node.name)
    steps = [{"name": "fetch_packages", "title": "Fetch packages from the panel"}]
    ingest_as_its_node(
        event_batch(
            install,
            (1, "progress", {"percent": 10, "stage": "Fetch packages from the panel"}),
            (2, "log", {"specs": steps, "steps": steps}),
            (3, "log", {"step": "fetch_packages", "title": steps[0]["title"], "step_state": "done"}),
        )
    )
    NodeStack.objects.create(node=node, install_operation=install, plan=steps, status="installing")
    quantize = Operation.objects.create(
        kind=OperationKind.CONVERT,
        node=node,
        target=model.name,
        params={"model": model.pk},
        status=OperationStatus.SUCCEEDED,
        stage="Quantized and verified",
        progress=100,
        finished=timezone.now(),
    )
    ModelArtifact.objects.filter(pk=rows["modelartifact"].pk).update(made_by=quantize)
    benchmark = rows["benchmark"]
    benchmark.status = "succeeded"
    benchmark.results = {"requests": 8, "failed": 0}
    benchmark.save()
    return {**rows, "install": install, "quantize": quantize}


def zh_pages(world, user):
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = "zh-hans"
    skip = set(PUBLIC) | TOKEN_GUARDED
    pages = {}
    for name, url in every_url(world):
        if url.startswith("/api/") or name in skip:
            continue
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-Hans")
        if response.status_code == 200 and response["Content-Type"].startswith("text/html"):
            pages[url] = response.content.decode()
    for operation in ("install", "quantize"):
        url = f"/operations/{world[operation].pk}/"
        pages[url] = client.get(url).content.decode()
        # What the page's script adds: the stage, and step titles from the events it fetches.
        summary = client.get(f"/api/v1/operations/{world[operation].pk}/").json()
        events = client.get(f"/api/v1/operations/{world[operation].pk}/events/").json()
        events = events.get("results", events) if isinstance(events, dict) else events
        texts = [summary.get("stage") or ""]
        for event in events:
            payload = event["payload"]
            texts += [payload.get("stage") or "", payload.get("title") or ""]
            texts += [step.get("title") or "" for step in payload.get("steps") or []]
        pages[url + " (script)"] = "".join(f"<p>{text}</p>" for text in texts if text)
    return pages


def test_every_page_in_chinese_leaves_no_english_ui_text(world_with_history, alice):
    msgids = english_msgids()
    assert len(msgids) > 500  # the catalog was read
    names = {"perm-node", "perm-model", "perm-deployment", "perm", "alice"}
    pages = zh_pages(world_with_history, alice)
    assert len(pages) >= 20, sorted(pages)
    assert any("/provisioning/nodes/" in url for url in pages)
    assert 'data-testid="serving-warning"' in pages["/provisioning/nodes/perm-node/"]
    left = {url: found for url, html in pages.items() if (found := english_left(html, msgids, names))}
    report = "\n".join(f"{url}: {sorted(set(found))}" for url, found in sorted(left.items()))
    assert not left, "English left on zh-hans pages:\n" + report


def test_the_checker_finds_english_it_is_meant_to_find():
    msgids = {"Fetch packages from the panel"}
    page = (
        '<p>已完成</p><td title="Stop it now">x</td><span class="mono">/data/models/Qwen3 weights</span>'
        "<li>Fetch packages from the panel</li><b>Quantized and verified</b><i>8 × 64 GB HBM</i>"
    )
    page += "<td>succeeded</td><td>8 NPUs</td>"
    assert english_left(page, msgids, set()) == [
        "Stop it now",
        "Fetch packages from the panel",
        "Quantized and verified",
        "succeeded",
    ]
