"""/v1/: the OpenAI-compatible gateway (included by panel/urls.py without a namespace prefix)."""

from django.urls import path, re_path

from panel.gateway import views

urlpatterns = [
    path("models", views.models, name="gateway-models"),
    path("models/<path:name>", views.model_detail, name="gateway-model"),
    path("chat/completions", views.chat_completions, name="gateway-chat-completions"),
    path("completions", views.completions, name="gateway-completions"),
    path("embeddings", views.embeddings, name="gateway-embeddings"),
    # Unnamed: anything else under /v1/ gets an OpenAI-shaped 404 rather than the panel's HTML one.
    re_path(r"^.*$", views.unknown),
]
