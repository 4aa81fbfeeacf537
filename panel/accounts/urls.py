from django.urls import path

from panel.accounts import views

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("settings/", views.settings_page, name="settings"),
    path("tokens/", views.create_token, name="create-token"),
    path("tokens/<int:pk>/revoke/", views.revoke_token, name="revoke-token"),
]
