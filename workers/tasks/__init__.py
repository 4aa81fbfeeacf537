"""Agent task functions, one module per kind of work. Importing this package registers them all."""

from workers.tasks import install, inventory  # noqa: F401
from workers.tasks import metrics  # noqa: F401
from workers.tasks import install_agent  # noqa: F401
from workers.tasks import deploy  # noqa: F401
from workers.tasks import models  # noqa: F401
