from django.urls import path

from panel.accounts import user_views, views

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("settings/", views.settings_page, name="settings"),
    path("password/", views.change_password, name="change-password"),
    path("password/new/", views.password_required, name="password-required"),
    path("tokens/", views.create_token, name="create-token"),
    path("tokens/<int:pk>/revoke/", views.revoke_token, name="revoke-token"),
    path("users/", user_views.user_list, name="users"),
    path("users/<int:pk>/role/", user_views.change_role, name="user-role"),
    path("users/<int:pk>/active/", user_views.set_active, name="user-active"),
    path("users/<int:pk>/password/", user_views.reset_password, name="user-password"),
]
