"""The agent: Celery app, task functions and the host toolkit. Never imports Django or panel."""
