from django.urls import path

from panel.deployments import edit_views, views, wizard

app_name = "deployments"
urlpatterns = [
    path("", views.deployment_list, name="list"),
    path("new/", wizard.wizard_start, name="new"),
    path("new/plan/", wizard.wizard_plan, name="wizard-plan"),
    path("new/<slug:step>/", wizard.wizard_step, name="wizard"),
    path("benchmarks/", views.benchmark_compare, name="benchmarks"),
    path("nodes/<slug:name>/resume/", views.resume_node, name="resume-node"),
    path("<slug:name>/", views.deployment_detail, name="detail"),
    path("<slug:name>/findings/", views.deployment_findings, name="findings"),
    path("<slug:name>/replicas/", views.deployment_replicas, name="replicas"),
    path("<slug:name>/benchmark/", views.deployment_benchmark, name="benchmark"),
    path("<slug:name>/edit/", edit_views.deployment_edit, name="edit"),
    path("<slug:name>/scale/", edit_views.deployment_scale, name="scale"),
    path("<slug:name>/rollback/", edit_views.deployment_rollback, name="rollback"),
    path("<slug:name>/<slug:action>/", views.deployment_action, name="action"),
]
