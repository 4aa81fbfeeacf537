"""The layers of docs/architecture.md, read from the code: every import of every module under panel/ and
workers/ (module level and inside functions, parsed with ast, nothing imported), checked against the tiers.

A failure names the file and line. Where a lower app must let a higher one react, it sends a domain event
(docs/architecture.md) instead of importing upward."""

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Module prefix → (tier, group); the longest matching prefix wins. An import is allowed within a group, and
# from a group to one in a lower tier. panel.accounts.roles imports nothing of panel and counts as core.
TIERS = {
    "panel.realtime.broadcast": (-1, "transport"),
    "panel.realtime.listen": (-1, "transport"),
    "panel.realtime.frames": (-1, "transport"),
    "panel.core": (0, "core"),
    "panel.accounts.roles": (0, "core"),
    "panel.audit": (0.5, "audit"),
    "panel.accounts": (1, "accounts"),
    "panel.nodes": (2, "nodes"),
    "panel.operations": (3, "operations"),
    "panel.provisioning": (4, "provisioning"),
    "panel.catalog": (4, "catalog"),
    "panel.fabric": (4, "fabric"),
    "panel.forensics": (4, "forensics"),
    "panel.monitoring": (4, "monitoring"),
    "panel.deployments": (5, "deployments"),
    "panel.gateway": (6, "gateway"),
    "panel": (7, "edge"),  # the project's wiring: urls, asgi, settings, celery, web, run
    "panel.realtime": (7, "edge"),  # the websocket: auth, groups, consumers, routing
    # core's web machinery that reads accounts or other apps: the dashboard page, the API docs page, the
    # Idempotency-Key decorator (its answers are accounts' rows), ?watch=true (it re-checks credentials) and
    # the API modules that use those two.
    "panel.core.dashboard": (7, "edge"),
    "panel.core.schema": (7, "edge"),
    "panel.core.streams": (7, "edge"),
    "panel.core.api_docs": (7, "edge"),
    "panel.core.idempotency": (7, "edge"),
    "panel.core.watch": (7, "edge"),
}
EDGE = 7
_PREFIXES = sorted(TIERS, key=len, reverse=True)
# Peers in a tier import each other only in these stated directions.
PEER_DIRECTIONS = {("forensics", "provisioning")}

# The web edge of every app: pages, API, forms, template tags, admin, management commands. Nothing imports
# them but urls and other edge modules, so they may gather from any app without making a circle.
EDGE_FILES = {"views.py", "pages.py", "wizard.py", "urls.py", "forms.py", "admin.py", "filtersets.py"}
EDGE_FILES |= {"context_processors.py", "wizard_state.py"}  # the wizard page's session state and step errors
EDGE_DIRS = {"api", "templatetags", "management"}

# Imports still against the layers: (file, imported module) → the domain event that will remove it.
# The list may only shrink: an entry no longer found fails too.
KNOWN_DEBT = {}

# Task internals and the agent's entry point: panel never imports them (an agent host has no panel).
AGENT_INTERNALS = ("workers.tasks", "workers.agent")
NOT_FOR_WORKERS = ("django", "panel", "rest_framework", "channels")

# Project imports inside function bodies in panel/ and workers/: each says why in a comment (the agent's
# start-up cost, the app registry in AppConfig.ready(), a circle inside one app), and there are few.
IN_FUNCTION_ALLOWANCE = 25


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _trees() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(), str(path))
        for top in ("panel", "workers")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.parts
    }


def _sources() -> list[tuple[Path, str]]:
    return [(path, _module_name(path)) for path in _trees()]


@cache
def _imports(path: Path, module: str) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import of the module. Imports are statements,
    so only statement bodies are walked, not expressions: that keeps the whole test near a second."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []

    def walk(statements, in_function):
        for node in statements:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name, in_function) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    target = ".".join(package[: len(package) - node.level + 1] + ([target] if target else []))
                for alias in node.names:  # `from panel.x import services` imports panel.x.services
                    submodule = f"{target}.{alias.name}"
                    found.append((node.lineno, submodule if _file_of(submodule) else target, in_function))
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for block in ("body", "orelse", "finalbody"):
                walk(getattr(node, block, ()), inner)
            for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                walk(part.body, inner)

    walk(_trees()[path].body, False)
    return sorted(set(found))


@cache
def _file_of(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def _tier(module: str) -> tuple[float, str] | None:
    for prefix in _PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            return TIERS[prefix]
    return None


def _is_edge_file(path: Path) -> bool:
    rel = path.relative_to(ROOT).parts
    return rel[-1] in EDGE_FILES or rel[-1].endswith("_views.py") or bool(EDGE_DIRS & set(rel[2:-1]))


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def _panel_violation(path: Path, module: str, target: str) -> str | None:
    if not target.startswith("panel"):
        return None
    if target.startswith("panel.cli") != module.startswith("panel.cli"):
        return "panel.cli talks REST only: it imports nothing of panel, and nothing in panel imports it"
    if module.startswith("panel.cli"):
        return None
    source, wanted = _tier(module), _tier(target)
    if wanted is None or source is None:
        return None
    target_file = _file_of(target)
    if _is_edge_file(path):
        source = (EDGE, "edge")
    elif target_file and _is_edge_file(target_file):
        return "a domain module imports a page, API or form module (the web edge)"
    if source[1] == wanted[1] or wanted[0] < source[0] or (source[1], wanted[1]) in PEER_DIRECTIONS:
        return None
    return f"{source[1]} (tier {source[0]}) imports {wanted[1]} (tier {wanted[0]})"


def _violations():
    for path, module in _sources():
        for line, target, _in_function in _imports(path, module):
            if not target:
                continue
            if module.startswith("workers"):
                if target.split(".")[0] in NOT_FOR_WORKERS:
                    yield path, line, target, "workers never import Django or panel"
                elif target.startswith("workers.agent") and not target.startswith("workers.agent_"):
                    yield path, line, target, "workers.agent is the entry point: it imports the tasks"
            elif target.startswith(AGENT_INTERNALS) and not target.startswith("workers.agent_"):
                yield path, line, target, "panel never imports an agent task's internals"
            else:
                reason = _panel_violation(path, module, target)
                if reason:
                    yield path, line, target, reason


def test_no_module_imports_against_the_layers():
    found = [(path, line, target, reason) for path, line, target, reason in _violations()]
    new = [
        f"{_where(path, line)}: imports {target}: {reason}"
        for path, line, target, reason in found
        if (str(path.relative_to(ROOT)), target) not in KNOWN_DEBT
    ]
    assert not new, "Imports against docs/architecture.md's layers:\n" + "\n".join(new)


def test_the_list_of_known_debt_only_shrinks():
    found = {(str(path.relative_to(ROOT)), target) for path, _line, target, _reason in _violations()}
    assert not set(KNOWN_DEBT) - found, f"Paid off: remove from KNOWN_DEBT: {sorted(set(KNOWN_DEBT) - found)}"


def _says_why(path: Path, line: int) -> bool:
    """A comment on the import, on an import next to it, or on the line above them."""
    lines = path.read_text().splitlines()
    first = last = line - 1
    while first > 0 and lines[first - 1].lstrip().startswith(("from ", "import ")):
        first -= 1
    while last + 1 < len(lines) and lines[last + 1].lstrip().startswith(("from ", "import ", ")", "    ")):
        if lines[last + 1].strip() == "":
            break
        last += 1
    return any("#" in text for text in lines[first : last + 1]) or (
        first > 0 and lines[first - 1].lstrip().startswith("#")
    )


def test_project_imports_inside_functions_are_few_and_say_why():
    inside = [
        (path, line)
        for path, module in _sources()
        for line, target, in_function in _imports(path, module)
        if in_function and target.split(".")[0] in ("panel", "workers")
    ]
    silent = [_where(path, line) for path, line in inside if not _says_why(path, line)]
    assert not silent, (
        "Imports of project modules inside functions: put them at module top, or say why not in a comment "
        "(the agent's start-up cost, the app registry, a circle inside one app):\n" + "\n".join(silent)
    )
    assert len(inside) <= IN_FUNCTION_ALLOWANCE, (
        f"{len(inside)} imports of project modules inside functions (allowance {IN_FUNCTION_ALLOWANCE}):\n"
        + "\n".join(_where(path, line) for path, line in inside)
    )
