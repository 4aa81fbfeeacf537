from django.urls import path

from panel.nodes import views

app_name = "nodes"
urlpatterns = [
    path("", views.node_list, name="list"),
    path("<slug:name>/", views.node_detail, name="detail"),
    path("<slug:name>/inventory/", views.run_inventory, name="inventory"),
]
