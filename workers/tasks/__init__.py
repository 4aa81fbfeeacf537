"""Agent task functions, one module per kind of work. Importing this package registers them all."""

from workers.tasks import (  # noqa: F401
    cancel,
    deploy,
    diagnostics,
    fabric,
    images,
    install,
    install_agent,
    inventory,
    metrics,
    model_tools,
    models,
    operation,
)
