from workers.celery_app import app
from workers.task_names import AGENT_SET_METRICS_INTERVAL


@app.task(name=AGENT_SET_METRICS_INTERVAL)
def set_metrics_interval(seconds: float) -> float:
    """The panel changed this node's sampling interval; the running sampler picks it up on its next tick."""
    from workers.sampler import set_interval

    return set_interval(seconds)
