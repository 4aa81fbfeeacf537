"""panel.core.infra.heap: the panel worker freezes its start-up heap once it is ready, so the collector's full
passes no longer walk it (they stopped the metrics ingester for up to 190 ms every few seconds)."""

import gc

from celery import signals

from panel.core.infra import heap


def test_a_ready_worker_freezes_what_start_up_left_alive():
    gc.unfreeze()
    long_lived = [object() for _ in range(1000)]
    heap.freeze_once_worker_is_ready()
    try:
        signals.worker_ready.send(sender=None)

        assert gc.get_freeze_count() >= len(long_lived)
        tracked = [list(range(3)) for _ in range(100)]
        # Frozen objects are out of every generation a full pass walks; what comes after is not frozen.
        walked = {id(obj) for obj in gc.get_objects()}
        assert id(tracked[0]) in walked
        assert id(long_lived) not in walked
    finally:
        gc.unfreeze()
        signals.worker_ready.disconnect(dispatch_uid="panel-freeze-startup-heap")
