"""The deployments' own refusals (409 at the API's edge), in a module that imports nothing of the app: the
services, the rollouts and the revisions all raise them, and services.py imports the rollouts' reconcile."""


class DeploymentConflict(Exception):
    """The deployment is in a state where this command makes no sense; the message says why."""
