"""What `?wait=` makes of a deployment's observed and desired states (panel/deployments/api/waiting.py)."""

import pytest

from panel.core.rest.streams import FAILED, REACHED
from panel.deployments.api.waiting import outcome

GONE = None


@pytest.mark.parametrize(
    ("target", "observed", "desired", "expected"),
    [
        ("running", "running", "running", REACHED),
        ("running", "starting", "running", None),
        ("running", "pending", "running", None),
        ("running", "stopping", "running", None),  # a restart on its way down
        ("running", "stopped", "running", None),  # ... and between down and up again
        ("running", "unhealthy", "running", FAILED),  # the start did not come up
        ("running", "failed", "running", FAILED),
        ("running", "stopping", "stopped", FAILED),  # stopped by someone meanwhile
        ("running", "stopping", "deleted", FAILED),
        ("running", GONE, GONE, FAILED),
        ("stopped", "stopped", "stopped", REACHED),
        ("stopped", "stopping", "stopped", None),
        ("stopped", "stopped", "running", FAILED),  # meant to run again (a restart passing through)
        ("stopped", "stopping", "deleted", None),  # a delete stops it first
        ("stopped", GONE, GONE, FAILED),
        ("deleted", GONE, GONE, REACHED),
        ("deleted", "stopping", "deleted", None),
        ("deleted", "running", "running", None),  # until someone deletes it, or the timeout
    ],
)
def test_a_wait_is_reached_failed_or_still_on_the_way(target, observed, desired, expected):
    assert outcome(target, observed, desired) == expected
