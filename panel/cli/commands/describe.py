"""`describe deployment NAME` and `describe node NAME`: one object for people, in sections, as kubectl
describe prints it: what it is, its spec and status, where it runs, what happened to it lately and what
went wrong. Scripts read `get … -o json` instead; this layout may change."""

from panel.cli import output
from panel.cli.client import ApiError, Client, connect, path_of
from panel.cli.commands import add_command, add_group, name_argument
from panel.cli.errors import CliError

RECENT_OPERATIONS = 10
LOG_TAIL_LINES = 10
GIB = 1024**3

EPILOG = """\
examples:
  ascend-panel describe deployment qwen-chat
  ascend-panel describe node sim-a2"""


def register(commands) -> None:
    describe = add_group(commands, "describe", "show a deployment or a node in detail")
    deployment = add_command(
        describe,
        "deployment",
        "a deployment: spec, status, replicas, NPUs, plan, rollout, recent operations, findings",
        epilog=EPILOG,
        aliases=["deployments"],
    )
    name_argument(deployment)
    deployment.set_defaults(run=describe_deployment)

    node = add_command(
        describe,
        "node",
        "a node: status, system, versions, NPUs and who holds them, deployments, open alerts, operations",
        epilog=EPILOG,
        aliases=["nodes"],
    )
    name_argument(node, completer="nodes", help="the node's name (or id)")
    node.set_defaults(run=describe_node)


# --- layout ------------------------------------------------------------------------------------------------


def fields(pairs: list[tuple[str, object]], indent: str = "") -> list[str]:
    """`Key:  value` lines, the values in one column; empty values are left out."""
    shown = [(key, value) for key, value in pairs if value not in (None, "", [], {})]
    width = max((len(key) for key, _ in shown), default=0) + 2
    return [f"{indent}{(key + ':').ljust(width)}{value}" for key, value in shown]


def section(title: str, lines: list[str], empty: str = "<none>") -> list[str]:
    return [f"{title}:", *(lines or [f"  {empty}"])]


def indented_table(rows: list[list], headers: list[str]) -> list[str]:
    return ["  " + line for line in output.table(rows, headers).splitlines()] if rows else []


def when(timestamp: str | None) -> str:
    return f"{timestamp} ({output.age(timestamp)} ago)" if timestamp else ""


def gib(size: int | None) -> str:
    return "" if size is None else f"{size / GIB:.1f} GiB"


def print_lines(lines: list[str]) -> None:
    print("\n".join(lines))


def recent_operations(client: Client, **filters) -> list[str]:
    """The newest operations that match, as table lines; a panel that cannot filter so says so."""
    try:
        page = client.get("/operations/", **filters)
    except ApiError as error:
        if error.status in (400, 403):
            return [f"  <not available: {error.message}>"]
        raise
    operations = (page.get("results") if isinstance(page, dict) else page) or []
    rows = [
        [
            output.age(op.get("created")),
            op.get("kind", ""),
            op.get("status", ""),
            op.get("target") or "",
            op.get("node") or "",
            op.get("error") or op.get("stage") or "",
        ]
        for op in operations[:RECENT_OPERATIONS]
    ]
    return indented_table(rows, ["AGE", "KIND", "STATUS", "TARGET", "NODE", "STAGE OR ERROR"])


# --- describe deployment -----------------------------------------------------------------------------------


def describe_deployment(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        try:
            spec = client.get(f"/deployments/{deployment['id']}/", format="spec")
        except ApiError as error:
            spec = {"<not available>": error.message}
        operations = recent_operations(client, target=deployment["name"])
    print_lines(deployment_lines(deployment, spec, operations))
    return 0


def deployment_lines(d: dict, spec: dict, operations: list[str]) -> list[str]:
    restarts = d.get("restart_count")
    if restarts is not None and d.get("failed_restarts"):
        restarts = f"{restarts} ({d['failed_restarts']} failed in a row)"
    lines = fields(
        [
            ("Name", d.get("name")),
            ("Id", d.get("id")),
            ("Replica of", d.get("replica_of")),
            ("Model", d.get("model_name")),
            ("Model copy", d.get("artifact")),
            ("Status", d.get("status")),
            ("Desired state", d.get("desired_state")),
            ("Reason", d.get("reason_display") or d.get("reason")),
            ("Endpoint", d.get("endpoint")),
            ("Served model", d.get("served_model_name")),
            ("Routing", d.get("routing")),
            ("Runtime", d.get("runtime_kind")),
            ("Restarts", restarts),
            ("Next restart", d.get("next_restart_at")),
            ("Draining until", d.get("drain_until")),
            ("Created", when(d.get("created"))),
        ]
    )
    spec_lines = ["  " + line for line in output.to_yaml(spec).splitlines()]
    lines += section("Spec", spec_lines)
    lines += section("Placement", placement_lines(d))
    lines += section("Engine plan", plan_lines((d.get("plan") or {}).get("plan") or {}))
    lines += replica_lines(d)
    lines += fields([("Autoscaling", autoscale_text(spec))])
    lines += section(
        "Planner warnings", [f"  {output.message_of(w)}" for w in (d.get("plan") or {}).get("warnings") or []]
    )
    lines += section("Recent operations", operations)
    lines += findings_lines(d.get("findings") or {})
    return lines


def placement_lines(d: dict) -> list[str]:
    by_node: dict[str, list] = {}
    for npu in d.get("npus") or []:
        by_node.setdefault(npu["node"], []).append(npu)
    rows = [
        [
            node,
            ", ".join(str(npu.get("logic_id")) for npu in npus),
            ", ".join(str(npu.get("npu_id")) for npu in npus),
        ]
        for node, npus in by_node.items()
    ]
    if not rows:  # a CPU node, or a deployment whose NPUs were released
        rows = [
            [part.get("node"), ", ".join(map(str, part.get("npus") or [])), ""]
            for part in d.get("placement") or []
        ]
    return indented_table(rows, ["NODE", "NPUS (LOGIC IDS)", "NPU IDS"])


def plan_lines(plan: dict) -> list[str]:
    settings = [
        f"{key} {plan[key]}"
        for key in ("tensor_parallel_size", "data_parallel_size", "max_model_len", "dtype", "quantization")
        if plan.get(key) is not None
    ]
    lines = [f"  {', '.join(settings)}"] if settings else []
    if plan.get("kv_cache_tokens") is not None:
        lines.append(
            f"  KV cache: {plan['kv_cache_tokens']} tokens, {plan.get('max_concurrent_seqs')} sequences"
        )
    memory = plan.get("memory_per_npu") or {}
    if memory.get("total_bytes"):
        parts = [
            f"{label} {gib(memory.get(key))}"
            for label, key in (
                ("weights", "weights_bytes"),
                ("KV cache", "kv_cache_bytes"),
                ("reserve", "reserve_bytes"),
                ("free", "free_bytes"),
            )
            if memory.get(key) is not None
        ]
        lines.append(f"  HBM per NPU: {', '.join(parts)} of {gib(memory['total_bytes'])}")
    return lines


def replica_lines(d: dict) -> list[str]:
    wanted = d.get("replicas_wanted")
    members = [{"name": d.get("name"), "status": d.get("status"), "desired_state": d.get("desired_state")}]
    members += d.get("replicas") or []
    roles = d.get("roles_wanted") or {}
    if roles:  # a disaggregated deployment: each engine's role, and what each role wants
        members[0]["role"] = d.get("role")
        rows = [[m.get("name"), m.get("role") or "-", m.get("status"), m.get("desired_state")]
                for m in members]  # fmt: skip
        wanted_by_role = ", ".join(f"{role} {count}" for role, count in roles.items())
        lines = [f"Replicas: {wanted_by_role} wanted"]
        lines += indented_table(rows, ["NAME", "ROLE", "STATUS", "DESIRED"])
    else:
        rows = [[m.get("name"), m.get("status"), m.get("desired_state")] for m in members]
        lines = [f"Replicas: {wanted} wanted" if wanted else "Replicas:"]
        lines += indented_table(rows, ["NAME", "STATUS", "DESIRED"])
    rollout = d.get("rollout")
    if rollout:
        replaced = f"{rollout.get('done')}/{rollout.get('total')} replaced"
        state = f"#{rollout.get('id')} {rollout.get('status')}, {replaced}"
        if rollout.get("status") == "running":
            state += f", phase {rollout.get('phase')}"
        message = rollout.get("message_display") or rollout.get("message")
        lines += fields([("Rollout", f"{state}: {message}" if message else state)])
    return lines


def autoscale_text(spec: dict) -> str:
    """What the autoscaler owns, from the spec: `1-4 replicas on waiting_per_replica 4 (up after 30 s, down
    after 300 s)`, or per role `prefill …; decode …`; "" when no count scales."""

    def one(scale: dict) -> str:
        target = ", ".join(f"{name} {value:g}" for name, value in (scale.get("target") or {}).items())
        return (
            f"{scale.get('min')}-{scale.get('max')} replicas on {target} "
            f"(up after {scale.get('up_after_s')} s, down after {scale.get('down_after_s')} s)"
        )

    if spec.get("autoscale"):
        return one(spec["autoscale"])
    roles = spec.get("roles") or {}
    return "; ".join(
        f"{role} {one(entry['autoscale'])}" for role, entry in roles.items() if entry.get("autoscale")
    )


def findings_lines(findings: dict) -> list[str]:
    lines = []
    for finding in findings.get("findings") or []:
        lines.append(f"  {output.message_of(finding)}")
        if isinstance(finding, dict) and finding.get("hint"):
            lines.append(f"    hint: {finding['hint']}")
    result = section("Findings", lines)
    tail = (findings.get("log_tail") or [])[-LOG_TAIL_LINES:]
    if tail:
        result += section(
            f"Log tail of the last failed start (last {len(tail)} lines)", [f"  {line}" for line in tail]
        )
    return result


# --- describe node -----------------------------------------------------------------------------------------


def describe_node(args) -> int:
    with connect() as client:
        try:
            node = client.get(f"/nodes/{path_of(args.name)}/")
        except ApiError as error:
            if error.status == 404:
                raise CliError(f"No node named {args.name!r}.") from None
            raise
        deployments = list(client.pages("/deployments/", node=node["name"]))
        try:
            alerts = [alert_row(a) for a in client.pages("/alerts/", node=node["name"], open="true")]
            alert_lines = indented_table(alerts, ["AGE", "SEVERITY", "KIND", "NPU", "MESSAGE"])
        except ApiError as error:
            alert_lines = [f"  <not available: {error.message}>"]
        operations = recent_operations(client, node=node["name"])
    lines = node_lines(node, deployments)
    lines += section("Open alerts", alert_lines)
    lines += section("Recent operations", operations)
    print_lines(lines)
    return 0


def alert_row(alert: dict) -> list:
    npu = alert.get("npu_id")
    return [
        output.age(alert.get("first_seen")),
        alert.get("severity"),
        alert.get("kind"),
        "" if npu is None else npu,
        alert.get("message"),
    ]


def node_lines(node: dict, deployments: list[dict]) -> list[str]:
    labels = node.get("labels") or {}
    lines = fields(
        [
            ("Name", node.get("name")),
            ("Id", node.get("id")),
            ("Status", node.get("status")),
            ("Address", node.get("address")),
            ("Transport", node.get("transport")),
            (
                "Labels",
                ", ".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else labels,
            ),
            ("Cordoned", "yes (no new deployments)" if node.get("cordoned") else "no"),
            ("Last heartbeat", when(node.get("last_heartbeat"))),
            ("Agent version", node.get("agent_version")),
            ("Inventoried", when(node.get("inventoried_at"))),
            ("Created", when(node.get("created"))),
        ]
    )
    lines += section("System", system_lines(node.get("facts") or {}))
    versions = node.get("versions") or {}
    rows = [
        [name, (info or {}).get("version", ""), (info or {}).get("path", "")]
        for name, info in versions.items()
        if isinstance(info, dict)
    ]
    lines += section("Versions", indented_table(rows, ["COMPONENT", "VERSION", "FROM"]))
    lines += section("NPUs", npu_lines(node, deployments))
    rows = [
        [
            d["name"],
            d.get("status", ""),
            ", ".join(str(n["logic_id"]) for n in d.get("npus") or [] if n.get("node") == node["name"]),
        ]
        for d in deployments
    ]
    lines += section("Deployments", indented_table(rows, ["NAME", "STATUS", "NPUS (LOGIC IDS)"]))
    return lines


def system_lines(facts: dict) -> list[str]:
    cpu = facts.get("cpu") or {}
    memory = facts.get("memory") or {}
    cores = f" ({cpu['sockets']} sockets, {cpu.get('cores')} cores)" if cpu.get("sockets") else ""
    numa = facts.get("numa_nodes")
    return fields(
        [
            ("OS", (facts.get("os") or {}).get("pretty_name")),
            ("Kernel", " ".join(str(v) for v in (facts.get("kernel"), facts.get("arch")) if v)),
            ("CPU", f"{cpu.get('model') or ''}{cores}".strip()),
            ("NUMA nodes", len(numa) if isinstance(numa, list) else numa),
            ("Memory", gib(memory.get("total_bytes"))),
        ],
        indent="  ",
    )


def npu_lines(node: dict, deployments: list[dict]) -> list[str]:
    holders: dict[int, list[str]] = {}
    for d in deployments:
        for npu in d.get("npus") or []:
            if npu.get("node") == node["name"]:
                holders.setdefault(npu.get("logic_id"), []).append(d["name"])
    rows = [
        [
            npu.get("logic_id"),
            npu.get("npu_id"),
            npu.get("chip_id"),
            npu.get("name") or "",
            npu.get("health") or "",
            gib(npu["hbm_total_mb"] * 1024**2) if npu.get("hbm_total_mb") else "",
            "" if npu.get("numa_node") is None else npu["numa_node"],
            npu.get("bus_id") or "",
            ", ".join(holders.get(npu.get("logic_id"), [])),
        ]
        for npu in sorted(
            node.get("npus") or [], key=lambda n: (n.get("logic_id") is None, n.get("logic_id") or 0)
        )
    ]
    return indented_table(rows, ["LOGIC", "NPU", "CHIP", "NAME", "HEALTH", "HBM", "NUMA", "BUS", "USED BY"])
