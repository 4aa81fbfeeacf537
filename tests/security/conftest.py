"""The attack tier: attacks as a node would run them, with its own real credential, against the real panel
worker and agent (the integration tier's in-process Celery worker and Redis)."""

from tests.integration.conftest import celery_worker  # noqa: F401  (a fixture)
