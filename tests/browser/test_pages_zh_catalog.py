"""Every page a Chinese reader can reach, in a real browser: no text the catalog translates is left in
English. The walk starts from the sidebar and follows every same-site link of a seeded panel (the sim node,
a running deployment, the staged model and its operations, an open alert), with the language set to
zh-hans, after the pages' scripts have filled in their live figures; a text node (or a title, placeholder or
aria-label) that equals a catalog msgid whose zh_Hans translation differs is English shown where a
translation exists, and the failure names the page and the string. Text inside data (monospace names,
paths, commands, logs) is left out: it is the admin's, not the UI's.

The templates are checked against the catalog too: a {% translate %} or {% blocktranslate %} whose msgid
the .po does not hold would show in English whatever the walk finds."""

import re
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Error as PlaywrightError

from panel.run import free_port
from tests.browser.conftest import REPO, SIM_NODES, wait_until

PO = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
TEMPLATES = REPO / "templates"
SIM_NODE = SIM_NODES[0][0]
DEPLOYMENT = "zh-walk"
ALERT_NPU = 6
# Where a walk starts; links found on these pages (and on the pages they lead to) are followed.
START = ("/", "/nodes/", f"/nodes/{SIM_NODE}/", "/models/", "/deployments/", "/deployments/new/", "/alerts/")
# Not pages of the panel's UI: the API and its browsable docs (Swagger's own), Django's admin (Django's own
# catalog), static files, the Prometheus exposition, and signing out (which would end the walk).
NOT_UI = re.compile(r"^/(?:api/|admin/|static/|media/|metrics|accounts/logout|i18n/)")
MAX_PAGES = 80
# Text nodes and the attributes a reader sees, outside data: what a page shows in its own words.
VISIBLE_TEXTS = """
() => {
  const DATA =
    "script, style, noscript, template, pre, code, kbd, samp, .mono, .log, [data-raw], [translate=no]";
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.nodeValue.replace(/\\s+/g, " ").trim();
    if (text && !node.parentElement.closest(DATA)) found.push(text);
  }
  for (const element of document.body.querySelectorAll("[title], [placeholder], [aria-label]")) {
    if (element.closest(DATA)) continue;
    for (const name of ["title", "placeholder", "aria-label"]) {
      const value = (element.getAttribute(name) || "").replace(/\\s+/g, " ").trim();
      if (value) found.push(value);
    }
  }
  return found;
}
"""
SAME_SITE_LINKS = """
() => [...document.querySelectorAll("a[href]")]
  .filter((a) => !a.hasAttribute("download"))
  .map((a) => a.getAttribute("href"))
"""


def po_entries(path: Path = PO) -> dict[str, str]:
    """msgid -> msgstr of the .po (plural entries by their singular; fuzzy entries count as untranslated).
    Entries are read line by line: helpers add theirs without always leaving a blank line between."""
    entries: dict[str, str] = {}
    entry: dict[str, str] = {}
    fuzzy = pending_fuzzy = False
    current = None

    def close():
        if entry.get("msgid"):
            entries[entry["msgid"]] = "" if fuzzy else entry.get("msgstr", "")

    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#~"):
            continue
        if line.startswith("#"):
            pending_fuzzy = pending_fuzzy or (line.startswith("#,") and "fuzzy" in line)
            current = None
            continue
        keyword = re.match(r'^(msgid|msgid_plural|msgstr(?:\[0\])?|msgstr\[\d+\]|msgctxt) "', line)
        if keyword:
            name = keyword.group(1).replace("[0]", "")
            if name in ("msgid", "msgctxt") and "msgstr" in entry:
                close()
                entry, fuzzy, pending_fuzzy = {}, pending_fuzzy, False
            elif name == "msgid" and not entry:
                fuzzy, pending_fuzzy = pending_fuzzy, False
            current = name if not name.startswith("msgstr[") else None
            if current:
                entry[current] = ""
            line = line[len(keyword.group(1)) + 1 :]
        elif not line.startswith('"'):
            current = None
        if current:
            entry[current] += _unquote(line)
    close()
    return entries


def _unquote(quoted: str) -> str:
    body = quoted.strip()[1:-1]
    return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def translated_msgids(entries: dict[str, str]) -> set[str]:
    """Catalog msgids shown differently in 简体中文: seen as they are on a zh-hans page, they went
    untranslated."""
    return {msgid for msgid, msgstr in entries.items() if msgstr and msgstr != msgid and len(msgid) > 1}


TRANSLATE = re.compile(
    r"""\{%\s*(?:translate|trans)\s+(["'])(.*?)\1(?:\s+(?:noop|as\s+\w+|context\s+\S+))*\s*%\}"""
)
BLOCK = re.compile(
    r"\{%\s*(?:blocktranslate|blocktrans)\b([^%]*)%\}(.*?)\{%\s*endblocktrans(?:late)?\s*%\}", re.S
)


def template_msgids(folder: Path = TEMPLATES) -> dict[str, str]:
    """msgid -> the template it is in, for every literal {% translate %} and {% blocktranslate %} (its
    singular, with {{ name }} as %(name)s, as makemessages writes it)."""
    found: dict[str, str] = {}
    for template in sorted(folder.rglob("*.html")):
        text = template.read_text(encoding="utf-8")
        where = str(template.relative_to(folder.parent))
        for match in TRANSLATE.finditer(text):
            found.setdefault(match.group(2), where)
        for options, body in BLOCK.findall(text):
            singular = re.split(r"\{%\s*plural\s*%\}", body)[0].replace("%", "%%")
            msgid = re.sub(r"\{\{\s*(\w+)\s*\}\}", r"%(\1)s", singular)
            if "trimmed" in options.split():
                msgid = " ".join(line.strip() for line in msgid.splitlines() if line.strip())
            found.setdefault(msgid, where)
    return found


def english_shown(texts: list[str], msgids: set[str]) -> list[str]:
    return sorted({text for text in texts if text in msgids})


@pytest.fixture(scope="module")
def seeded(live_panel, staged_model):
    """The sim node online, the staged model (inspected: its operations), a deployment of it and an open
    alert; the deployment is deleted and the fault cleared afterwards."""
    root = str(live_panel.sim_root(SIM_NODE))
    with live_panel.api("alice") as client:
        listed = client.get("/api/v1/deployments/").json()["results"]
        deployment = next((d for d in listed if d["name"] == DEPLOYMENT), None)
        if deployment is None:
            held = {n["npu_id"] for d in listed for n in d["npus"] if n["node"] == SIM_NODE}
            npu = next(i for i in range(8) if i not in held and i != ALERT_NPU)
            response = client.post(
                "/api/v1/deployments/",
                json={
                    "name": DEPLOYMENT,
                    "model": staged_model["id"],
                    "artifact": next(a["id"] for a in staged_model["artifacts"] if a["ready"]),
                    "nodes": [{"node": SIM_NODE, "npus": [npu]}],
                    "max_model_len": 1024,
                    "port": free_port(),
                },
            )
            assert response.status_code == 201, response.text
            deployment = response.json()
        url = f"/api/v1/deployments/{deployment['id']}/"
        wait_until(
            lambda: client.get(url).json()["status"] == "running", 120, f"{DEPLOYMENT} was not running"
        )
        live_panel.sim("fault", "--root", root, "--npu", str(ALERT_NPU), "--health", "Alarm")
        try:
            wait_until(
                lambda: client.get("/api/v1/alerts/").json()["results"],
                60,
                "no alert was raised for an NPU in Alarm",
            )
            yield {"deployment": deployment["name"], "model": staged_model["id"]}
        finally:
            live_panel.sim("fault", "--root", root, "--clear")
            live_panel.mark_npus_healthy(SIM_NODE)  # failed by the policy, it would stay out of service
            client.delete(url)  # stops it and gives its NPU back to the tests that follow


def walk(page, live_panel) -> dict[str, list[str]]:
    """Every UI page reachable from START (same site, no query string): path -> the texts it shows."""
    queue, seen, shown = deque(START), set(START), {}
    site = urlsplit(live_panel.url).netloc
    while queue and len(shown) < MAX_PAGES:
        path = queue.popleft()
        try:
            response = page.goto(path, wait_until="load")
        except PlaywrightError as error:
            if "Download is starting" in str(error):  # a file (an export, a bundle), not a page
                continue
            raise
        if (
            response is None
            or response.status != 200
            or "text/html" not in response.headers.get("content-type", "")
        ):
            continue
        page.wait_for_timeout(700)  # live figures, charts and lists fill in from the websocket and the API
        shown[path] = page.evaluate(VISIBLE_TEXTS)
        for href in page.evaluate(SAME_SITE_LINKS):
            parts = urlsplit(href)
            if parts.netloc not in ("", site) or not parts.path.startswith("/") or parts.query:
                continue
            if parts.path not in seen and not NOT_UI.match(parts.path):
                seen.add(parts.path)
                queue.append(parts.path)
    return shown


def test_no_page_in_chinese_shows_a_catalog_string_in_english(seeded, panel_page, live_panel):
    msgids = translated_msgids(po_entries())
    assert len(msgids) > 1000  # the catalog was read
    page = panel_page("alice", locale="zh-hans")

    shown = walk(page, live_panel)

    assert f"/deployments/{seeded['deployment']}/" in shown or any(DEPLOYMENT in p for p in shown), sorted(
        shown
    )
    assert f"/models/{seeded['model']}/" in shown, sorted(shown)
    assert any(p.startswith("/operations/") and p != "/operations/" for p in shown), sorted(shown)
    assert len(shown) >= 15, sorted(shown)
    left = {path: found for path, texts in shown.items() if (found := english_shown(texts, msgids))}
    report = "\n".join(f"{path}: {found}" for path, found in sorted(left.items()))
    walked = f"\n({len(shown)} pages walked: {', '.join(sorted(shown))})"
    assert not left, "English shown where the catalog has 简体中文:\n" + report + walked


def test_every_template_string_is_in_the_catalog():
    entries = po_entries()
    missing = {msgid: where for msgid, where in template_msgids().items() if not entries.get(msgid)}
    report = "\n".join(f"{where}: {msgid!r}" for msgid, where in sorted(missing.items(), key=lambda i: i[1]))
    assert not missing, "template strings without a zh_Hans translation:\n" + report


def test_the_checks_find_what_they_are_meant_to_find(tmp_path):
    po = tmp_path / "django.po"
    po.write_text(
        'msgid ""\nmsgstr ""\n\n'
        'msgid "Nodes"\nmsgstr "节点"\n\n'
        '#, fuzzy\nmsgid "Stop"\nmsgstr "停止"\n\n'
        'msgid ""\n"Two "\n"lines"\nmsgstr "两行"\n\n'
        'msgid "OK"\nmsgstr "OK"\n',
        encoding="utf-8",
    )
    entries = po_entries(po)
    assert entries == {"Nodes": "节点", "Stop": "", "Two lines": "两行", "OK": "OK"}
    assert translated_msgids(entries) == {"Nodes", "Two lines"}
    assert english_shown(["节点", "Nodes", "OK", "Two lines"], translated_msgids(entries)) == [
        "Nodes",
        "Two lines",
    ]
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "x.html").write_text(
        '{% translate "Nodes" %}{% blocktranslate with n=count %}{{ n }} at 50% '
        "{% plural %}many{% endblocktranslate %}"
        "{% blocktranslate trimmed %}\n  One\n  two\n{% endblocktranslate %}",
        encoding="utf-8",
    )
    assert set(template_msgids(folder)) == {"Nodes", "%(n)s at 50%% ", "One two"}


def test_the_npu_topology_header_sits_above_its_rows(live_panel, panel_page):
    # In a scroll box the header's sticky offset (the top bar's height) counts from the box's top: it was
    # drawn over the first rows of the table, at rest as well as scrolled.
    page = panel_page("alice", locale="zh-hans")
    page.goto(f"/nodes/{SIM_NODE}/")
    table = page.get_by_test_id("npu-topology")
    table.scroll_into_view_if_needed()
    header = table.locator("thead th").first.bounding_box()
    first_row = table.locator("tbody tr").first.bounding_box()
    assert header["y"] + header["height"] <= first_row["y"] + 1, (header, first_row)
