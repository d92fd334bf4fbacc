from django.contrib import admin

from apikit.models import AccessKey


@admin.register(AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    list_display = ["access_key_id", "user", "status", "created_at", "last_used_at"]
    list_filter = ["status"]
    exclude = ["secret_encrypted"]  # never shown again after creation
    readonly_fields = ["access_key_id", "user", "created_at", "last_used_at"]
