"""Sync work of long-lived requests without a thread per request.

Under the ASGI server (panel.web), Django runs a request's sync code (middleware, DRF views) in a thread of
that request's own (asgiref's per-request ThreadSensitiveContext) and keeps the thread until the response is
sent. A `?wait=` or `?watch=true` keeps its response open for minutes or hours, so once its DRF part is done
it hands that thread back (`release_request_thread`) and does its later database reads on a small pool that
every wait and watch of the process shares (`on_shared_threads`). A thousand waiting requests are a thousand
coroutines awaiting the channel layer, not a thousand parked threads.
"""

import functools
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import close_old_connections, connections

# Reads are short (one deployment, one page of operations); two threads keep one slow query from holding
# up every other wait in the process.
_SHARED = ThreadPoolExecutor(max_workers=2, thread_name_prefix="panel-streams")


async def release_request_thread() -> None:
    """End the current request's own sync thread, after closing its database connections.

    Sync work of the request after this (Django's response middleware, request_finished) gets a new thread
    of its own, which lives only as long as that work. Under a sync caller (the test client, WSGI) the
    request runs on the caller's thread, which is not this request's to end: nothing happens then."""
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return
    # asgiref keeps a request's executor in this map, keyed by the ThreadSensitiveContext Django's
    # ASGIHandler opened for it; taking it out is what ThreadSensitiveContext.__aexit__ does at the end.
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is None:
        return
    executor = SyncToAsync.context_to_thread_executor.get(context)
    if executor is None:
        return
    await sync_to_async(connections.close_all)()  # runs on that thread: its connections, not another's
    if SyncToAsync.context_to_thread_executor.get(context) is executor:
        del SyncToAsync.context_to_thread_executor[context]
        executor.shutdown(wait=False)  # idle: the thread ends as soon as it sees the shutdown


def _with_fresh_connections(function):
    @functools.wraps(function)
    def run(*args, **kwargs):
        # As channels' database_sync_to_async: drop a connection that went stale between calls, and do not
        # keep one open past CONN_MAX_AGE.
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return run


async def on_shared_threads(function, *args, **kwargs):
    """Run sync `function` (database reads, serializers) on the pool waits and watches share. The caller's
    context (the request's language) goes along, as with any sync_to_async call."""
    runner = sync_to_async(_with_fresh_connections(function), thread_sensitive=False, executor=_SHARED)
    return await runner(*args, **kwargs)
