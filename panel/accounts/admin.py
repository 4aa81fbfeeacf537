from django.contrib import admin

from panel.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created", "expires", "last_used", "revoked"]
    list_filter = ["revoked"]
    readonly_fields = ["key_hash", "prefix", "created", "last_used"]
    search_fields = ["name", "user__username", "prefix"]
