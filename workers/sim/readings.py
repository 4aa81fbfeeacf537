"""What each simulated chip reads right now: memory, AICore, power, temperature, health, processes.

Figures depend on the live holders and on time, so a dashboard sees them move: a deterministic wobble
of time (and pid) keeps two calls a second apart slightly different while tests stay reproducible
for a fixed clock.
"""

import math
from dataclasses import dataclass

from workers.sim.profiles import FAMILY_910_93, Chip, Profile
from workers.sim.state import ecc_of, health_of, live_holders

MAX_PROCESSES_PER_CHIP = 8  # npu-smi lists at most this many per chip
PROCESS_NAME_WIDTH = 15  # npu-smi cuts process names to this many characters


@dataclass(frozen=True)
class Process:
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class ChipReading:
    chip: Chip
    health: str
    memory_used_mb: int
    aicore_percent: int
    power_w: float | None  # None where npu-smi prints `-` (second A3 die)
    temperature_c: int
    processes: tuple[Process, ...]
    load: float


def wobble(now: float, seed: float) -> float:
    """A smooth value in 0..1 that changes every call a second apart and repeats for a fixed clock."""
    return (math.sin(now * 0.9 + seed * 1.7) + math.sin(now * 0.23 + seed * 0.61) + 2) / 4


def read_chips(profile: Profile, state: dict, now: float) -> list[ChipReading]:
    holders = live_holders(state)
    readings = []
    for chip in profile.chips:
        on_chip = [h for h in holders if chip.logic_id in h["logic_ids"]]
        held_mb = sum(h["hbm_mb_per_chip"] for h in on_chip)
        load = max((h.get("load", 0.0) for h in on_chip), default=0.0)
        seed = chip.logic_id + sum(h["pid"] for h in on_chip) % 97
        jitter = wobble(now, seed)

        aicore = round(min(100.0, load * 88 + 6 * jitter)) if load > 0 else 0
        busy = (0.10 if on_chip else 0.0) + 0.80 * load
        power = profile.idle_power_w + (profile.max_power_w - profile.idle_power_w) * busy + 2.4 * jitter
        heat = (power - profile.idle_power_w) / (profile.max_power_w - profile.idle_power_w)
        temperature = profile.idle_temp_c + round(26 * heat + 2 * jitter)
        # An A3 card's power is reported on die 0 only; die 1 shows `-`.
        second_die = profile.family == FAMILY_910_93 and chip.chip_id == 1
        power_shown = None if second_die else round(power, 1)

        processes = tuple(
            Process(h["pid"], h["name"][:PROCESS_NAME_WIDTH], h["hbm_mb_per_chip"])
            for h in on_chip[:MAX_PROCESSES_PER_CHIP]
        )
        readings.append(
            ChipReading(
                chip=chip,
                health=chip_health(state, chip.npu_id, chip.chip_id),
                memory_used_mb=min(chip.memory_total_mb, chip.memory_base_mb + held_mb),
                aicore_percent=aicore,
                power_w=power_shown,
                temperature_c=temperature,
                processes=processes,
                load=load,
            )
        )
    return readings


def chip_health(state: dict, npu_id: int, chip_id: int) -> str:
    """The injected health word; a chip with uncorrectable ECC errors and none injected shows Warning."""
    health = health_of(state, npu_id, chip_id)
    if health == "OK" and ecc_of(state, npu_id, chip_id)["hbm_double"]:
        return "Warning"
    return health


def mcu_power_w(profile: Profile, readings: list[ChipReading], npu_id: int) -> float:
    """Card power as the MCU reports it (310P prints NA in the table and gives power here)."""
    chips = [r for r in readings if r.chip.npu_id == npu_id]
    busy = max((0.10 if r.processes else 0.0) + 0.80 * r.load for r in chips)
    return round(profile.idle_power_w + (profile.max_power_w - profile.idle_power_w) * busy, 1)


def mcu_temperature_c(profile: Profile, readings: list[ChipReading], npu_id: int) -> int:
    return max(r.temperature_c for r in readings if r.chip.npu_id == npu_id) - 8
