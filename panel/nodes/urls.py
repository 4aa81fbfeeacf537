from django.urls import path

from panel.nodes import health_views, image_views, views

app_name = "nodes"
urlpatterns = [
    path("", views.node_list, name="list"),
    path("add/", views.node_add, name="add"),
    path("agent/join/", views.agent_join, name="agent-join"),
    path("agent/install.sh", views.agent_install_script, name="agent-install-script"),
    path("agent/ascend-panel-agent.service", views.agent_unit, name="agent-unit"),
    path("agent/ascend-panel.tar.gz", views.agent_package, name="agent-package"),
    path("<slug:name>/", views.node_detail, name="detail"),
    path("<slug:name>/inventory/", views.run_inventory, name="inventory"),
    path("<slug:name>/images/", image_views.node_images, name="images"),
    path("<slug:name>/confirm-host-key/", views.confirm_host_key, name="confirm-host-key"),
    path("<slug:name>/install-agent/", views.install_agent, name="install-agent"),
    path("<slug:name>/rejoin/", views.rejoin, name="rejoin"),
    path("<slug:name>/cordon/", views.cordon, name="cordon"),
    path("<slug:name>/drain/", views.drain, name="drain"),
    path("<slug:name>/npu-health/", health_views.npu_health_override, name="npu-health"),
    path("<slug:name>/settings/", views.node_settings, name="settings"),
    path("<slug:name>/remove/", views.remove, name="remove"),
]
