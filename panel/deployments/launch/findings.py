"""The toolkit's diagnose findings of a deployment's last failed start, as its page and API show them.

Findings are stored as the agent sent them (English title and hint, panel/core/templatetags/panel_text.py
translates them at display). Some hints only hold where the engine runs: the MLA one names vLLM's CPU
backends, so a deployment on NPUs gets the signature's NPU hint instead."""

from workers.ascend.signatures import SIGNATURES

NPU_HINTS = {signature.code: signature.npu_hint for signature in SIGNATURES if signature.npu_hint}
NPU_HINT_FOR = {signature.hint: signature.npu_hint for signature in SIGNATURES if signature.npu_hint}


def on_npus(deployment) -> bool:
    return deployment.npus.exists()


def findings_of(deployment) -> list[dict]:
    """The stored findings, each with the hint that fits where this deployment runs."""
    findings = (deployment.runtime or {}).get("findings") or []
    if not any(finding.get("code") in NPU_HINTS for finding in findings) or not on_npus(deployment):
        return findings
    return [
        {**finding, "hint": NPU_HINTS[finding["code"]]} if finding.get("code") in NPU_HINTS else finding
        for finding in findings
    ]


def fitting_hint(hint: str, deployment) -> str:
    """A launch's hint (the agent repeats its first finding's) as it fits where this deployment runs."""
    if hint in NPU_HINT_FOR and on_npus(deployment):
        return NPU_HINT_FOR[hint]
    return hint
