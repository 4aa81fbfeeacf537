"""The panel worker's start-up heap, taken out of the garbage collector's full passes.

A panel worker holds some 200,000 objects once Django, Celery and the apps are loaded, nearly all of them
alive until it exits. CPython's full collection walks every one of them each time it runs: bench/fleet.py
at 512 nodes logged 130-190 ms per pass, one every ten seconds or so in each worker, and the whole process
stands still meanwhile. The metrics ingester's thread with it: every sample in flight waited, which was the
worst of the fleet's agent → browser tail. Frozen objects stay alive and are never walked; what the process
allocates afterwards is collected as before. The web processes do not freeze theirs: their full passes never
showed in the fan-out's time (publish → browser 24 ms at p99), and a freeze at import would reach every test
process that imports panel.asgi.
"""

import gc

from celery import signals


def _freeze_when_ready(sender=None, **kwargs) -> None:
    """Collect once, then move everything alive into the permanent generation."""
    gc.collect()
    gc.freeze()


def freeze_once_worker_is_ready() -> None:
    """Freeze the heap when the Celery worker has started (its consumer and bootsteps built)."""
    signals.worker_ready.connect(_freeze_when_ready, weak=False, dispatch_uid="panel-freeze-startup-heap")
