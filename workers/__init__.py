"""The agent: Celery app, task functions and the host toolkit. Never imports Django or panel."""

__version__ = "0.1.0"
