from workers.celery_app import app
from workers.task_names import INGEST_EVENTS


@app.task(name=INGEST_EVENTS)
def ingest_events(batch: dict) -> int:
    from panel.operations.services import ingest_events as ingest

    return len(ingest(batch))
