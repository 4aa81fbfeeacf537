from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class NodesConfig(AppConfig):
    name = "panel.nodes"
    label = "nodes"

    def ready(self):
        # models load only once the app registry is ready
        from panel.nodes.agents.trust import forget_credentials

        # The metrics path caches node credentials: a node added, removed or given a new one drops the cache.
        post_save.connect(forget_credentials, sender="nodes.Node", dispatch_uid="node-credentials-saved")
        post_delete.connect(forget_credentials, sender="nodes.Node", dispatch_uid="node-credentials-deleted")
