from django.contrib import admin

from datasets.models import CodeSource, Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["dataset_id", "name", "workspace", "uri", "mount_path", "accessibility", "owner"]
    list_filter = ["workspace", "data_source_type"]
    search_fields = ["dataset_id", "name", "uri"]


@admin.register(CodeSource)
class CodeSourceAdmin(admin.ModelAdmin):
    list_display = ["code_source_id", "display_name", "workspace", "code_repo", "code_branch", "code_commit",
                    "mount_path", "owner"]
    list_filter = ["workspace"]
    search_fields = ["code_source_id", "display_name", "code_repo"]
