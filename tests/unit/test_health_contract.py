"""The health fields a sample carries (workers.contracts.NpuHealthProbe) are bounded like every other field a
node sends (issue 32): a node's hostile or buggy probe is refused alone when it is read."""

import pytest
from pydantic import ValidationError

from workers.contracts import MetricBatch


def batch(probe: dict) -> dict:
    npu = {"npu_id": 0, "chip_id": 0, "health": "Alarm", "probe": probe}
    sample = {
        "time": "2026-12-06T10:00:00+00:00",
        "host": {"cpu_pct": 1, "memory_used_mb": 1, "memory_total_mb": 2, "load1": 0},
    }
    return {"node": "n1", "samples": [{**sample, "npus": [npu]}]}


def test_a_probe_with_codes_ecc_and_link_is_taken():
    probe = {"error_codes": ["80E18402"], "ecc": {"hbm_double": 3}, "link": "DOWN", "link_up_count": 4}
    taken = MetricBatch.model_validate(batch(probe)).samples[0].npus[0].probe
    assert (taken.error_codes, taken.ecc.hbm_double, taken.link, taken.gone) == (
        ["80E18402"],
        3,
        "DOWN",
        False,
    )


@pytest.mark.parametrize(
    "probe",
    [
        {"error_codes": ["80e18402; rm -rf /"]},
        {"error_codes": ["80E18402"] * 17},
        {"ecc": {"hbm_double": -1}},
        {"ecc": {"hbm_double": 2**32}},
        {"ecc": {"hbm_double": 1.5}},
        {"link": "SIDEWAYS"},
        {"link_up_count": 2**40},
        {"gone": "yes please"},
    ],
)
def test_an_out_of_bounds_probe_is_refused(probe):
    with pytest.raises(ValidationError):
        MetricBatch.model_validate(batch(probe))
