from django.urls import path

from panel.deployments.pages import decision_views, edit_views, history_views, sleep_views, views, wizard

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
    path("<slug:name>/history/", history_views.deployment_history, name="history"),
    path("<slug:name>/decisions/", decision_views.deployment_decisions, name="decisions"),
    path("<slug:name>/sleep-box/", sleep_views.deployment_sleep_box, name="sleep_box"),
    path("<slug:name>/sleep/", sleep_views.deployment_sleep, name="sleep"),
    path("<slug:name>/wake/", sleep_views.deployment_wake, name="wake"),
    path("<slug:name>/<slug:action>/", views.deployment_action, name="action"),
]
