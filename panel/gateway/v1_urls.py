"""/v1/: the OpenAI-compatible gateway (included by panel/urls.py without a namespace prefix)."""

from django.urls import path, re_path

from panel.gateway import views

urlpatterns = [
    path("models", views.models, name="gateway-models"),
    path("models/<path:name>", views.model_detail, name="gateway-model"),
    path("chat/completions", views.chat_completions, name="gateway-chat-completions"),
    path("completions", views.completions, name="gateway-completions"),
    path("embeddings", views.embeddings, name="gateway-embeddings"),
    re_path(r"^(?P<rest>.*)$", views.unknown, name="gateway-unknown"),
]
