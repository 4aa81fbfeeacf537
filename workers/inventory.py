"""Inventory of the host the agent runs on: facts the panel stores on Node and Npu."""

import platform
import socket

import psutil


def collect_inventory(emitter, config) -> dict:
    emitter.progress(10, "Reading host facts")
    memory = psutil.virtual_memory()
    facts = {
        "hostname": socket.gethostname(),
        "arch": platform.machine(),
        "kernel": platform.release(),
        "cpu_count": psutil.cpu_count(logical=True),
        "memory_total_mb": memory.total // (1024 * 1024),
    }
    for key, value in facts.items():
        emitter.log(f"{key}: {value}")
    emitter.progress(100, "Inventory complete")
    return {"facts": facts, "npus": [], "versions": {}}
