"""The container runtime in planning: what a node offers, the checks before a start, the review's command.

A deployment with `runtime: container` names its image. Each node must have a container engine that
answers (the inventory's facts["containers"]); an official vllm-ascend image is checked against the node's
chip and driver (workers.containers.official.preflight); an image the node does not hold yet is a warning
(pull or load it before the start). The review shows the `run` line as the node will run it, from what
the inventory saw there (engine, Ascend Docker Runtime, NUMA CPUs); the agent adds its own host settings
(extra mounts, passed variables) and logs the exact line it ran.
"""

from __future__ import annotations

import shlex
from typing import Any

from django.utils.translation import gettext as _

from panel.provisioning.services import installed_stack
from workers.containers import lifecycle
from workers.containers.official import official_images, preflight
from workers.engine.launch.container import IMAGE_PATTERN, ContainerSpec, build_container_run
from workers.engine.launch.launch_spec import launch_spec_from_payload

LOG_PATH = "/var/lib/ascend-panel/deployments/{name}.log"


def containers_of(node) -> dict:
    return (node.facts or {}).get("containers") or {}


def engine_of(node) -> dict | None:
    """The engine the node's agent runs containers with (as the last inventory saw it), or None."""
    facts = containers_of(node)
    return next((e for e in facts.get("engines") or [] if e.get("name") == facts.get("engine")), None)


def images_on(node) -> list[dict]:
    engine = engine_of(node)
    return list(engine.get("images") or []) if engine else []


def has_image(node, reference: str) -> bool:
    wanted = reference if ":" in reference.rsplit("/", 1)[-1] or "@" in reference else f"{reference}:latest"
    return any(image.get("reference") in (reference, wanted) for image in images_on(node))


def offer(node, chip: str) -> dict[str, Any]:
    """What the wizard's runtime step shows for a node: its venv stack, its engines and images, and the
    official images built for its chip."""
    facts = containers_of(node)
    return {
        "node": node.name,
        "stack": installed_stack(node),
        "engines": facts.get("engines") or [],
        "engine": facts.get("engine"),
        "ascend_docker_runtime": facts.get("ascend_docker_runtime") or {},
        "images": images_on(node),
        "official": [image.as_dict() for image in official_images(chip=chip)] if chip != "cpu" else [],
    }


def check(image: str, parts, chip: str) -> tuple[dict[str, list[str]], list[dict]]:
    """(field errors, warnings) of running `image` on these node parts."""
    errors: dict[str, list[str]] = {}
    warnings: list[dict] = []
    if not image:
        example = _example(chip)
        return {
            "image": [
                _("Name the image to run (runtime: container), e.g. %(example)s.") % {"example": example}
            ]
        }, []
    if not IMAGE_PATTERN.fullmatch(image):
        return {
            "image": [_("%(image)s is not an image reference (registry/name:tag).") % {"image": image}]
        }, []
    for part in parts:
        node = part.node
        if engine_of(node) is None:
            seen = ", ".join(e.get("name", "?") for e in containers_of(node).get("engines") or []) or _(
                "none"
            )
            errors.setdefault("runtime", []).append(
                _(
                    "%(node)s has no container engine that answers (found: %(seen)s). Install docker, podman "
                    "or iSula there and run the inventory again, or choose runtime: process."
                )
                % {"node": node.name, "seen": seen}
            )
            continue
        driver = (node.versions or {}).get("driver")
        for problem in preflight(image, chip=None if chip == "cpu" else chip, driver=driver):
            errors.setdefault("image", []).append(f"{node.name}: {problem.hint}")
        if not has_image(node, image):
            warnings.append(
                {
                    "code": "image_not_on_node",
                    "level": "warning",
                    "message": _(
                        "%(node)s does not hold %(image)s yet: pull it or load it on the node's Images tab "
                        "before the deployment starts."
                    )
                    % {"node": node.name, "image": image},
                }
            )
    return errors, warnings


def _example(chip: str) -> str:
    images = official_images(chip=chip) if chip != "cpu" else []
    return images[0].reference if images else "quay.io/ascend/vllm-ascend:v0.11.0"


def container_payload(image: str, npus) -> dict:
    """What the agent gets besides the launch: the image and the NPUs' physical ids (/dev/davinciN)."""
    return {
        "image": image,
        "device_ids": [npu.device_id if npu.device_id is not None else npu.logic_id for npu in npus],
        "host_network": True,
    }


def _numa_cpus(node, numa_node) -> str | None:
    for entry in (node.facts or {}).get("numa_nodes") or []:
        if entry.get("node") == numa_node:
            return entry.get("cpulist") or None
    return None


def review(node, payload: dict, container: dict, name: str) -> dict:
    """The run line for the review: {"argv", "command", "engine"}."""
    engine = engine_of(node) or {"name": "docker"}
    spec = launch_spec_from_payload(payload, log_path=LOG_PATH.format(name=name), venv_path=None)
    cpus = _numa_cpus(node, spec.numa_node) if spec.chip != "cpu" else None
    run = build_container_run(
        ContainerSpec(
            launch=spec,
            name=lifecycle.container_name(name),
            image=container["image"],
            device_ids=tuple(container.get("device_ids") or ()),
            engine=engine["name"],
            host_network=container.get("host_network", True),
            cpuset_cpus=cpus,
            cpuset_mems=str(spec.numa_node) if cpus else None,
            ascend_runtime="" if spec.chip == "cpu" else engine.get("ascend_runtime") or "",
            labels=((lifecycle.commands.LABEL_DEPLOYMENT, name), (lifecycle.commands.LABEL_NODE, node.name)),
            env_file=lifecycle.env_file_path("/", name),
        )
    )
    return {"argv": run.argv, "command": shlex.join(run.argv), "engine": engine["name"]}
