"""Agent task functions, one module per kind of work. Importing this package registers them all."""

from workers.tasks import (  # noqa: F401
    deploy,  # noqa: F401
    install,
    install_agent,  # noqa: F401
    inventory,
    metrics,  # noqa: F401
    models,  # noqa: F401
)
