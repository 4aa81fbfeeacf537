from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from panel.accounts.models import ApiToken
from panel.accounts.roles import role_of
from panel.audit import actions
from panel.audit.services import record


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created", "expires", "last_used", "revoked"]
    list_filter = ["revoked"]
    readonly_fields = ["key_hash", "prefix", "created", "last_used"]
    search_fields = ["name", "user__username", "prefix"]


def _role_in_database(user_model, pk) -> str:
    return role_of(user_model.objects.filter(pk=pk).first()) or ""


admin.site.unregister(get_user_model())


@admin.register(get_user_model())
class PanelUserAdmin(UserAdmin):
    """Django's user admin, where roles (groups, superuser, active) change: each change is audited."""

    def save_model(self, request, obj, form, change):
        obj._audit_role_before = _role_in_database(type(obj), obj.pk) if change else ""
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)  # the groups are saved here
        user = form.instance
        before, after = getattr(user, "_audit_role_before", ""), _role_in_database(type(user), user.pk)
        if before != after:
            record(
                request.user,
                actions.ROLE_CHANGED,
                user.get_username(),
                request=request,
                before=before,
                after=after,
            )
