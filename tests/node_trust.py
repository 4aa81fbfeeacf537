"""A node's side of the trust boundary in tests: this process holding one node's credential only, as that
node's (compromised) host would; the panel's counters of what it refused; an operation on a given node."""

from workers.identity import use_keys


def as_node_a(nodes_a_and_b):
    """This process holds node A's credential only, as A's (compromised) host would."""
    from panel.nodes.agents.trust import agent_key

    use_keys({"node-a": agent_key(nodes_a_and_b[0])})


def rejected(kind: str) -> int:
    from panel.core.infra.refusals import rejected_counts

    return rejected_counts().get(kind, 0)


def operation_on(node, kind="inventory"):
    from panel.operations.models import Operation

    return Operation.objects.create(kind=kind, node=node, target=node.name, task_name="agent.inventory")
