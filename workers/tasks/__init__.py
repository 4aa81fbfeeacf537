"""Agent task functions, one module per kind of work. Importing this package registers them all."""

from workers.tasks import inventory  # noqa: F401
from workers.tasks import install_agent  # noqa: F401
