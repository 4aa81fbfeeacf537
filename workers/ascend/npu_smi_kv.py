"""Parse the `key : value` outputs: `npu-smi info -l` and `npu-smi info -t TYPE -i N [-c C]`.

npu-smi prints each line as TAB, key padded to 30, " : ", value; copies show the TAB as 8 spaces or
nothing. Blocks are split at blank lines and where a key repeats: that covers both `-t common`
(whose chip blocks open with `Chip ID`) and `-t usages` / `temp` / `power` (whose blocks close with
it) without knowing which is which.
"""

import re

from workers.ascend.npu_smi_errors import nothing_found, raise_for_error
from workers.ascend.npu_smi_values import known_text, to_float, to_int, to_number

# Keys that describe the NPU as a whole: a block holding only these is context for the chip blocks
# that follow, not a reading of its own.
NPU_CONTEXT_KEYS = frozenset({"NPU ID", "Chip Count", "Total Count"})
# What a key looks like; it keeps log lines with a colon ("[INFO limiter::manager] ...") out.
_KEY = re.compile(r"^[A-Za-z][\w .()%/+-]*$")


def parse_kv(text: str) -> list[dict[str, str]]:
    """Raw blocks of `key : value` lines, in order. Values are trimmed strings, `NA` included."""
    blocks: list[dict[str, str]] = []
    block: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        key = key.strip()
        if not colon or not _KEY.match(key):
            if not line.strip() and block:
                blocks.append(block)
                block = {}
            continue
        if key in block:
            blocks.append(block)
            block = {}
        block[key] = value.strip()
    if block:
        blocks.append(block)
    return blocks


def parse_list(text: str) -> list[dict]:
    """`npu-smi info -l` -> [{"npu_id", "chip_count", "product_name", "serial_number", "fields"}].

    An explicit `Total Count : 0` is an empty list; a text with no NPU blocks otherwise raises.
    """
    raise_for_error(text)
    blocks = parse_kv(text)
    npus = [
        {
            "npu_id": to_int(block["NPU ID"]),
            "chip_count": to_int(block.get("Chip Count")),
            "product_name": known_text(block.get("Product Name") or block.get("Name")),
            "serial_number": known_text(block.get("Serial Number")),
            "fields": block,
        }
        for block in blocks
        if "NPU ID" in block
    ]
    total = next((to_int(block["Total Count"]) for block in blocks if "Total Count" in block), None)
    if not npus and total != 0:
        raise nothing_found(text, "NPU list")
    return npus


class NpuReading:
    """One block of `npu-smi info -t ...` with normalised accessors over the raw keys.

    Key spellings differ between versions and products (`Temperature(C)`, `Temperature (C)`,
    `NPU Temperature (C)`; `Health Status`, `Health`), so each accessor tries them all. An accessor
    is None when the block lacks the key or npu-smi printed `NA`.
    """

    def __init__(self, fields: dict[str, str], npu_id: int | None = None, chip_id: int | None = None):
        self.fields = dict(fields)
        self._npu_id = npu_id
        self._chip_id = chip_id
        self._by_key = {_key(name): value for name, value in fields.items()}

    def __repr__(self) -> str:
        return f"NpuReading(npu_id={self.npu_id}, chip_id={self.chip_id}, fields={self.fields!r})"

    def raw(self, *names: str) -> str | None:
        """The first of `names` present (case and spacing ignored), as printed."""
        for name in names:
            value = self._by_key.get(_key(name))
            if value is not None:
                return value
        return None

    @property
    def npu_id(self) -> int | None:
        printed = to_int(self.raw("NPU ID"))
        return self._npu_id if printed is None else printed

    @property
    def chip_id(self) -> int | None:
        printed = to_int(self.raw("Chip ID"))
        return self._chip_id if printed is None and not self.is_mcu else printed

    @property
    def chip_name(self) -> str | None:
        return known_text(self.raw("Chip Name"))

    @property
    def is_mcu(self) -> bool:
        """The board's management controller: `-t common` / `-t temp` add a block for it."""
        return (self.chip_name or "").lower() == "mcu"

    @property
    def temperature_c(self) -> int | float | None:
        return to_number(self.raw("NPU Temperature (C)", "Temperature (C)", "Chip Temperature (C)"))

    @property
    def power_w(self) -> float | None:
        return to_float(self.raw("NPU Real-time Power(W)", "Real-time Power(W)", "Power(W)"))

    @property
    def health(self) -> str | None:
        return known_text(self.raw("Health Status", "Health"))

    @property
    def error_code(self) -> str | None:
        return known_text(self.raw("Error Code"))

    @property
    def aicore_pct(self) -> int | float | None:
        return to_number(self.raw("Aicore Usage Rate(%)"))

    @property
    def aicpu_pct(self) -> int | float | None:
        return to_number(self.raw("Aicpu Usage Rate(%)"))

    @property
    def npu_util_pct(self) -> int | float | None:
        return to_number(self.raw("NPU Utilization(%)"))

    @property
    def hbm_total_mb(self) -> int | None:
        return to_int(self.raw("HBM Capacity(MB)"))

    @property
    def hbm_usage_pct(self) -> int | float | None:
        return to_number(self.raw("HBM Usage Rate(%)"))

    @property
    def hbm_used_mb(self) -> int | None:
        """Capacity times usage rate: npu-smi -t prints only a whole percentage, so ±1% of total."""
        return _used_mb(self.hbm_total_mb, self.hbm_usage_pct)

    @property
    def memory_total_mb(self) -> int | None:
        return to_int(self.raw("DDR Capacity(MB)", "Memory Capacity(MB)"))

    @property
    def memory_usage_pct(self) -> int | float | None:
        return to_number(self.raw("DDR Usage Rate(%)", "Memory Usage Rate(%)"))

    @property
    def memory_used_mb(self) -> int | None:
        """Like hbm_used_mb, for the DDR: the device memory of 310 / 310P / 310B."""
        return _used_mb(self.memory_total_mb, self.memory_usage_pct)

    @property
    def aicore_freq_mhz(self) -> int | None:
        return to_int(self.raw("Aicore curFreq(MHZ)", "Aicore Freq(MHZ)"))

    @property
    def bus_id(self) -> str | None:
        return known_text(self.raw("PCIe Bus Info"))

    @property
    def firmware_version(self) -> str | None:
        return known_text(self.raw("Firmware Version"))

    @property
    def soc_name(self) -> str | None:
        """`Chip Type` + `Chip Name` from `-t board -c C` (e.g. "Ascend" + "910B3"), as vllm-ascend
        builds it; None when the block does not print both."""
        chip_type = known_text(self.raw("Chip Type"))
        if chip_type is None or self.chip_name is None:
            return None
        return f"{chip_type}{self.chip_name}"

    def to_dict(self) -> dict:
        """Every normalised accessor plus the raw fields, for JSON and logs."""
        return {name: getattr(self, name) for name in NORMALISED_FIELDS} | {"fields": self.fields}


NORMALISED_FIELDS = (
    "npu_id",
    "chip_id",
    "chip_name",
    "is_mcu",
    "temperature_c",
    "power_w",
    "health",
    "error_code",
    "aicore_pct",
    "aicpu_pct",
    "npu_util_pct",
    "hbm_total_mb",
    "hbm_usage_pct",
    "hbm_used_mb",
    "memory_total_mb",
    "memory_usage_pct",
    "memory_used_mb",
    "aicore_freq_mhz",
    "bus_id",
    "firmware_version",
    "soc_name",
)


def parse_readings(text: str, npu: int | None = None, chip: int | None = None) -> list[NpuReading]:
    """`npu-smi info -t TYPE -i N [-c C]` -> one NpuReading per chip (and MCU) block.

    `npu` / `chip` are the -i / -c the caller passed: some types (`health` on 910A) print no ids.
    A leading `NPU ID` / `Chip Count` block gives its NPU id to the blocks after it. Raises
    NpuSmiError when the text holds no block (e.g. "This device does not support querying ...").
    """
    # Failures come first: a loader error ("npu-smi: error while loading ...") looks like a key.
    raise_for_error(text)
    readings: list[NpuReading] = []
    npu_id = npu
    for block in parse_kv(text):
        if "NPU ID" in block:
            npu_id = to_int(block["NPU ID"])
        if set(block) <= NPU_CONTEXT_KEYS:
            continue
        readings.append(NpuReading(block, npu_id=npu_id, chip_id=chip))
    if not readings:
        raise nothing_found(text, "key : value readings")
    return readings


def _used_mb(total_mb: int | None, usage_pct: int | float | None) -> int | None:
    if total_mb is None or usage_pct is None:
        return None
    return round(total_mb * usage_pct / 100)


def _key(name: str) -> str:
    return re.sub(r"\s+", "", name).lower()
