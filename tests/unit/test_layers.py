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
    "panel.core.web.dashboard": (7, "edge"),
    "panel.core.rest.schema": (7, "edge"),
    "panel.core.rest.streams": (7, "edge"),
    "panel.core.rest.api_docs": (7, "edge"),
    "panel.core.rest.idempotency": (7, "edge"),
    "panel.core.rest.watch": (7, "edge"),
}
EDGE = 7
_PREFIXES = sorted(TIERS, key=len, reverse=True)
# Peers in a tier import each other only in these stated directions.
PEER_DIRECTIONS = {("forensics", "provisioning")}

# The web edge of every app: pages, API, forms, template tags, admin, management commands. Nothing imports
# them but urls and other edge modules, so they may gather from any app without making a circle.
EDGE_FILES = {"views.py", "pages.py", "wizard.py", "urls.py", "forms.py", "admin.py", "filtersets.py"}
EDGE_FILES |= {"context_processors.py", "wizard_state.py"}  # the wizard page's session state and step errors
EDGE_DIRS = {"api", "pages", "templatetags", "management"}  # pages/: an app's HTML room (deployments)

# Imports still against the layers: (file, imported module) → the domain event that will remove it.
# The list may only shrink: an entry no longer found fails too.
KNOWN_DEBT = {}

# Task internals and the agent's entry point: panel never imports them (an agent host has no panel).
AGENT_INTERNALS = ("workers.tasks", "workers.agent")
NOT_FOR_WORKERS = ("django", "panel", "rest_framework", "channels")

# Project imports inside function bodies in panel/ and workers/: each says why in a comment (the agent's
# start-up cost, the app registry in AppConfig.ready()), and there are few: the allowance is today's count.
# Never to hide a circle: test_no_two_modules_import_each_other counts them too.
IN_FUNCTION_ALLOWANCE = 15


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


# DRF is the API's edge: domain code raises the panel's own errors (panel.core.domain.errors), which
# panel.core.rest.exceptions maps to the same statuses and bodies. Besides the web edge (views, api/, pages/,
# …), these modules plug into DRF, so they may import it:
REST_EDGE = {
    "panel.core.rest": "the API machinery every app's API extends, and the mapping of the panel's errors",
    "panel.settings": "DRF's settings",
    "panel.accounts.authentication": "DRF's authentication class for API tokens",
    "panel.accounts.permissions": "DRF's permission classes (roles, token scopes)",
    "panel.realtime.auth": "a watch's credential re-check reads which DRF authenticator signed it in",
}
# Domain modules whose schema is written as DRF serializers (the spec and its parts, the request the planner
# checks) and run by domain code itself (spec.parse_spec, planning.plan_request), whose serializer errors
# leave as InvalidInput: they may import `rest_framework.serializers` (and drf_spectacular), nothing else
# of DRF. The list may only shrink.
DRF_SCHEMAS = {
    "panel.deployments.spec.spec",
    "panel.deployments.spec.request",
    "panel.deployments.spec.roles_spec",
    "panel.deployments.autoscale.spec_field",
}


def _rest_framework_imports() -> list[tuple[Path, str, int, str]]:
    """(file, module, line, what) for every import of rest_framework outside the web edge and REST_EDGE;
    `what` is the dotted name imported (`rest_framework.serializers`)."""
    found = []
    for path, module in _sources():
        if _is_edge_file(path) or any(module == p or module.startswith(p + ".") for p in REST_EDGE):
            continue
        if "rest_framework" not in path.read_text():
            continue
        for node in ast.walk(_trees()[path]):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [(path, module, node.lineno, n) for n in names if n.split(".")[0] == "rest_framework"]
    return found


def test_domain_code_imports_nothing_of_drf():
    """A module outside the API's edge that imports rest_framework (to raise its ValidationError, say)
    fails here, named: raise InvalidInput or NotAllowed (panel.core.domain.errors) instead."""
    found = [
        f"{_where(path, line)}: imports {what}"
        for path, module, line, what in _rest_framework_imports()
        if not (module in DRF_SCHEMAS and what == "rest_framework.serializers")
    ]
    assert not found, (
        "Domain modules importing DRF (raise panel.core.domain.errors' InvalidInput or NotAllowed; the API "
        "edge maps them):\n" + "\n".join(found)
    )


def test_the_list_of_drf_schemas_only_shrinks():
    importing = {module for _path, module, _line, _what in _rest_framework_imports()}
    assert not DRF_SCHEMAS - importing, (
        f"No DRF left: remove from DRF_SCHEMAS: {sorted(DRF_SCHEMAS - importing)}"
    )


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
        "(the agent's start-up cost, the app registry):\n" + "\n".join(silent)
    )
    assert len(inside) <= IN_FUNCTION_ALLOWANCE, (
        f"{len(inside)} imports of project modules inside functions (allowance {IN_FUNCTION_ALLOWANCE}):\n"
        + "\n".join(_where(path, line) for path, line in inside)
    )


def _import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (module level, inside functions and under TYPE_CHECKING)."""
    modules = {module for _path, module in _sources()}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for path, module in _sources():
        for _line, target, _in_function in _imports(path, module):
            if target in modules and target != module:
                graph[module].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each set of two or more modules that reach one another (Tarjan's strongly
    connected components), sorted. Iterative, so a long chain of imports never meets the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph.get(root, ()))))]
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return sorted(circles)


def cycle_through(circle: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One way round the circle, from its first module back to it (the shortest), for the failure message."""
    start, members = circle[0], set(circle)
    paths, queue = {start: [start]}, [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph.get(node, ())):
            if target == start:
                return [*paths[node], start]
            if target in members and target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return circle


# Circles still to break, by the prefix every module of the circle starts with → why it is still here. The
# list may only shrink: a prefix with no circle left fails too.
KNOWN_CIRCLES: dict[str, str] = {}


def _known(circle: list[str]) -> bool:
    return any(all(module.startswith(prefix) for module in circle) for prefix in KNOWN_CIRCLES)


def test_no_two_modules_import_each_other():
    """No import circle between modules anywhere in panel/ or workers/, even through others or inside a
    function: break one by moving the shared piece down, by a domain event, or by splitting a module."""
    graph = _import_graph()
    circles = [circle for circle in strongly_connected(graph) if not _known(circle)]
    assert not circles, "Modules that import each other (directly or through others):\n" + "\n".join(
        " → ".join(cycle_through(circle, graph)) + f"   [all of: {', '.join(circle)}]" for circle in circles
    )


def test_the_list_of_known_circles_only_shrinks():
    circles = strongly_connected(_import_graph())
    gone = [p for p in KNOWN_CIRCLES if not any(all(m.startswith(p) for m in circle) for circle in circles)]
    assert not gone, f"Broken: remove from KNOWN_CIRCLES: {gone}"


def test_the_circle_finder_names_every_module_of_a_circle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"g"}, "g": {"f", "d"}}
    assert strongly_connected(graph) == [["a", "b", "c"], ["f", "g"]]
    assert cycle_through(["a", "b", "c"], graph) == ["a", "b", "c", "a"]
    assert strongly_connected({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []  # a diamond is no circle


def test_a_circle_planted_in_the_real_import_graph_is_found():
    graph = _import_graph()
    assert "panel.core.domain.choices" in graph["panel.deployments.services"]  # services imports the choices
    graph["panel.core.domain.choices"].add("panel.deployments.services")  # core imports a use-case: a circle
    circles = strongly_connected(graph)
    assert any(
        {"panel.core.domain.choices", "panel.deployments.services"} <= set(circle) for circle in circles
    )
