"""The wizard's topology: one pool of replicas, or prefill and decode pools handing the KV cache over a
connector (docs/serving-plane.md §1). The fields only turn what the browser sent into the spec's `replicas`,
`roles:` and `kv_connector`; whether the split can run is the spec's and the launch matrix's to say
(panel/deployments/spec/roles_spec.py, workers/engine/launch/kv_transfer.py), whose errors come back onto
these fields through TOPOLOGY_SPEC_TO_FORM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import DeploymentRole
from panel.deployments.launch.launch_tuning import node_stack
from panel.deployments.placement.npus import chip_of
from panel.deployments.spec.roles_spec import KV_CONNECTORS, ROLES
from panel.operations.texts import agent_text
from workers.engine.launch.kv_transfer import KVTransferError, connector_row
from workers.i18n import message_of

POOL, SPLIT = "pool", "pd"
TOPOLOGY_CHOICES = [
    (POOL, _("One pool of replicas")),
    (SPLIT, _("Prefill and decode pools (disaggregated)")),
]
CONNECTOR_LABELS = {
    "mooncake": _("Mooncake (vllm-ascend)"),
    "nixl": _("NIXL (vLLM on CPU)"),
}
NPUS_REQUIRED = _("Choose at least one NPU (or a CPU node).")


def role_field(role: str, name: str) -> str:
    return f"{role}_{name}"


# The spec's error keys (as edit_views flattens them) → the placement step's fields.
TOPOLOGY_SPEC_TO_FORM = {
    "replicas": "replicas",
    "kv_connector": "kv_connector",
    "roles": "topology",
    "roles.non_field_errors": "topology",
    **{f"roles.{role}": role_field(role, "npus") for role in ROLES},
    **{f"roles.{role}.replicas": role_field(role, "replicas") for role in ROLES},
    **{f"roles.{role}.placement.node": role_field(role, "node") for role in ROLES},
    **{f"roles.{role}.placement.npus": role_field(role, "npus") for role in ROLES},
    **{f"roles.{role}.engine.tensor_parallel_size": role_field(role, "tp") for role in ROLES},
    **{f"roles.{role}.engine.data_parallel_size": role_field(role, "dp") for role in ROLES},
}
# A role's own engine settings the step takes (the spec's names); empty: the planner picks them.
ROLE_PARALLEL = {"tp": "tensor_parallel_size", "dp": "data_parallel_size"}


@dataclass
class ConnectorOffer:
    connector: str
    label: str
    usable: bool
    reason: str  # the launch matrix's, when it cannot run on the node


def connector_offers(node) -> list[ConnectorOffer]:
    """Each KV connector and whether the engine version on `node` has it (the launch matrix's row)."""
    npus = list(node.npus.exclude(logic_id=None))
    stack, chip = node_stack(node), chip_of(npus)
    offers = []
    for connector in KV_CONNECTORS:
        try:
            connector_row(connector, stack, chip)
        except KVTransferError as error:
            offers.append(
                ConnectorOffer(
                    connector, str(CONNECTOR_LABELS[connector]), False, agent_text(message_of(error))
                )
            )
        else:
            offers.append(ConnectorOffer(connector, str(CONNECTOR_LABELS[connector]), True, ""))
    return offers


def _parallel_size(label, help_text) -> forms.IntegerField:
    """A role's TP or DP field: 1 to 64 (the spec's roles.<role>.engine bounds), empty for the planner's."""
    return forms.IntegerField(label=label, required=False, min_value=1, max_value=64, help_text=help_text)


class TopologyFields(forms.Form):
    topology = forms.ChoiceField(
        label=_("Topology"),
        choices=TOPOLOGY_CHOICES,
        initial=POOL,
        required=False,
        widget=forms.RadioSelect,
        help_text=_(
            "One pool: every replica runs the whole model. Prefill and decode: prefill engines read the "
            "prompts and hand their KV cache to decode engines, which write the answers (long prompts at "
            "volume); the gateway sends each request to both."
        ),
    )
    replicas = forms.IntegerField(
        label=_("Replicas"),
        initial=1,
        required=False,
        help_text=_("Engines behind the one endpoint; each takes as many NPUs as chosen below, its own."),
    )
    kv_connector = forms.ChoiceField(
        label=_("KV connector"),
        required=False,
        widget=forms.RadioSelect,
        help_text=_("What hands the KV cache from prefill to decode, as the node's engine version has it."),
    )

    prompt_tokens = forms.IntegerField(
        label=_("Expected prompt tokens"), required=False, min_value=1, initial=4096
    )
    output_tokens = forms.IntegerField(
        label=_("Expected output tokens"), required=False, min_value=1, initial=512
    )

    def __init__(self, *args, offers=(), nodes=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.offers = list(offers)
        self.role_labels = {role: DeploymentRole(role).label for role in ROLES}
        self.fields["kv_connector"].choices = [(o.connector, o.label) for o in self.offers if o.usable]
        for role in ROLES:
            self.fields[role_field(role, "replicas")] = forms.IntegerField(
                label=_("Engines"), initial=1, required=False
            )
            self.fields[role_field(role, "node")] = forms.ChoiceField(
                label=_("Node"), choices=list(nodes), required=False
            )
            self.fields[role_field(role, "npus")] = forms.IntegerField(
                label=_("NPUs per engine"),
                required=False,
                help_text=_("Empty: as many as the planner needs for the model."),
            )
            self.fields[role_field(role, "tp")] = _parallel_size(
                _("TP"), _("Tensor parallel size of each engine; empty: the planner picks it.")
            )
            self.fields[role_field(role, "dp")] = _parallel_size(
                _("DP"), _("Data parallel size of each engine (TP x DP NPUs); empty: the planner picks it.")
            )

    def clean_topology(self) -> str:
        return self.cleaned_data.get("topology") or POOL

    def clean(self):
        data = super().clean()
        if data.get("topology") != SPLIT:
            # One pool runs on the NPUs chosen (a form without the NPU field keeps those it has).
            if "npus" in self.fields and not data.get("npus") and "npus" not in self.errors:
                self.add_error("npus", NPUS_REQUIRED)
            return data
        if not self.offers or not any(offer.usable for offer in self.offers):
            why = "; ".join(f"{offer.connector}: {offer.reason}" for offer in self.offers)
            self.add_error("topology", _("Prefill and decode cannot run here: {why}").format(why=why))
        elif not data.get("kv_connector") and "kv_connector" not in self.errors:
            self.add_error("kv_connector", _("Choose the connector that hands the KV cache over."))
        return data

    def roles(self) -> dict[str, Any]:
        return roles_from(self.cleaned_data)


def roles_from(data: dict[str, Any]) -> dict[str, Any]:
    """The spec's `roles:` from the cleaned fields (a blank count is left to the spec's default)."""
    roles: dict[str, Any] = {}
    for role in ROLES:
        entry: dict[str, Any] = {}
        replicas = data.get(role_field(role, "replicas"))
        if replicas is not None:
            entry["replicas"] = replicas
        npus = data.get(role_field(role, "npus"))
        entry["placement"] = {
            "node": data.get(role_field(role, "node")) or "",
            "npus": npus if npus is not None else "auto",
        }
        engine = {
            setting: data[role_field(role, name)]
            for name, setting in ROLE_PARALLEL.items()
            if data.get(role_field(role, name)) is not None
        }
        if engine:
            entry["engine"] = engine
        roles[role] = entry
    return roles


def topology_initial(state: dict[str, Any], default_node: str) -> dict[str, Any]:
    """The fields as the wizard's state has them (fresh: one pool, both roles on the model's node)."""
    initial: dict[str, Any] = {
        "topology": SPLIT if state.get("roles") else POOL,
        "replicas": state.get("replicas") or 1,
        "kv_connector": state.get("kv_connector"),
    }
    for role in ROLES:
        entry = (state.get("roles") or {}).get(role) or {}
        placement = entry.get("placement") or {}
        npus = placement.get("npus")
        initial[role_field(role, "replicas")] = entry.get("replicas", 1)
        initial[role_field(role, "node")] = placement.get("node") or default_node
        initial[role_field(role, "npus")] = npus if isinstance(npus, int) else None
        engine = entry.get("engine") or {}
        for name, setting in ROLE_PARALLEL.items():
            initial[role_field(role, name)] = engine.get(setting)
    return initial
