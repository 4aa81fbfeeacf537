"""The panel's own tasks (beat sweeps, the alert webhook, pruning, the reaper) run only when the panel sent
them: a node that can publish to the panel's queue can still not make the panel worker run any of them.

Each is registered with `panel_task`. Whatever process of the panel publishes one (beat, a web process, the
worker itself retrying) signs it on its way out (Celery's before_task_publish) with a key only the panel
derives from its secrets key, over its stamp (time, expiry, nonce: workers.identity), name, id and
arguments; the worker checks the signature, the stamp and the nonce before the task runs. Unsigned, badly
signed, stale or replayed ones are refused, logged and counted (kind "panel_task", panel.core.infra.refusals).
A task called as a plain function in-process (tests, the shell) is no message and is not checked.

The hook signs only what the panel itself decided to send. The panel sends no Celery canvas (callbacks,
errbacks, chains, chords): a task that carries one, or one published while the task running in this thread
carries one (Celery's trace publishes a request's callbacks and chain after it ran, through this very hook),
is work a message asked for, and goes out unsigned, so the worker refuses it (panel.nodes.agents.ingest_guard
refuses such messages from agents before they run; this is the second wall).

The agents' messages to the panel (events, heartbeats, probe answers, asks) are not panel tasks: they carry
their node's signature, checked by panel.nodes.agents.trust.
"""

import logging
from functools import lru_cache

from celery import Task, current_task
from celery.signals import before_task_publish

from panel.core.infra.refusals import first_sight, refuse
from panel.core.infra.secrets import key_material
from workers.celery_app import app
from workers.identity import (
    AUTH_KWARG,
    Untrusted,
    canonical,
    derive,
    fresh_stamp,
    new_stamp,
    signature,
    verify,
)

log = logging.getLogger(__name__)

PURPOSE = "ascend-panel panel tasks v1"
SIGNER = "panel"
# How long a panel task counts once sent: beat sends its sweeps again long before, and a retried webhook
# waits at most its longest back-off (64 s) before it runs.
VALIDITY_S = 3600.0

_own: set[str] = set()


@lru_cache(maxsize=4)
def _key(material: str) -> bytes:
    return derive(material, PURPOSE)


def _parts(stamp: str, name: str, task_id: str, args, kwargs: dict) -> tuple[bytes, ...]:
    unsigned = {k: v for k, v in kwargs.items() if k != AUTH_KWARG}
    return stamp.encode(), name.encode(), task_id.encode(), canonical(list(args)), canonical(unsigned)


def sign(name: str, task_id: str, args, kwargs: dict) -> dict:
    stamp = new_stamp(VALIDITY_S)
    return {
        "stamp": stamp,
        "sig": signature(_key(key_material()), *_parts(stamp, name, task_id, args, kwargs)),
    }


def check(name: str, task_id: str, args, kwargs: dict) -> None:
    """Raises Untrusted unless the panel signed this task, recently, and it was not run before."""
    auth = kwargs.get(AUTH_KWARG)
    if not isinstance(auth, dict):
        raise Untrusted(f"panel task {name} carries no signature")
    stamp_text = str(auth.get("stamp", ""))
    parts = _parts(stamp_text, name, task_id, args, kwargs)
    if not verify(_key(key_material()), str(auth.get("sig", "")), *parts):
        raise Untrusted(f"panel task {name} has a signature the panel's key does not verify")
    stamp = fresh_stamp(stamp_text, "panel_task")
    if not first_sight(SIGNER, stamp):
        raise Untrusted(f"panel task {name} {task_id} was delivered before (a replay)", "replayed")


class PanelTask(Task):
    def __call__(self, *args, **kwargs):
        if not self.request.called_directly:
            try:
                check(self.name, self.request.id or "", args, kwargs)
            except Untrusted as why:
                refuse("panel_task", "?", str(why), why.reason)
                return None
        kwargs.pop(AUTH_KWARG, None)
        return super().__call__(*args, **kwargs)


def panel_task(name: str, **options):
    """Register one of the panel's own tasks: signed when sent, checked before it runs."""
    _own.add(name)
    return app.task(name=name, base=PanelTask, **options)


CANVAS_FIELDS = ("callbacks", "errbacks", "chain", "chord")


def asked_for_by_a_message(body) -> bool:
    """Whether a publish of the panel's is canvas: carried by the task itself, or by the request of the task
    running in this thread (whose callbacks and chain Celery publishes after it ran)."""
    embed = body[2] if len(body) > 2 and isinstance(body[2], dict) else {}
    if any(embed.get(field) for field in CANVAS_FIELDS):
        return True
    running = current_task
    request = getattr(running, "request", None) if running else None
    return bool(request is not None and any(getattr(request, field, None) for field in CANVAS_FIELDS))


@before_task_publish.connect(weak=False)
def _sign_on_the_way_out(sender=None, body=None, headers=None, **_):
    if sender not in _own or not isinstance(body, tuple | list) or len(body) < 2:
        return
    if asked_for_by_a_message(body):
        refuse("panel_task", "?", f"{sender}: published as a callback, chain or chord: not signed", "canvas")
        return
    args, kwargs = body[0], body[1]
    kwargs[AUTH_KWARG] = sign(sender, str((headers or {}).get("id", "")), args, kwargs)
