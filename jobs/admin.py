from django.contrib import admin

from jobs.models import Job, JobEvent, JobSpec, Pod, PodEvent, RestartRecord, StatusTransition


class ViewOnly:
    """Jobs and pods change only through the jobs services (create_job, stop, delete), which check
    the quota, keep the scheduler's books and tell the agents; the admin shows them and no more."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class JobSpecInline(ViewOnly, admin.TabularInline):
    model = JobSpec
    extra = 0


class PodInline(ViewOnly, admin.TabularInline):
    model = Pod
    fields = ["pod_id", "node", "status", "sub_status", "exit_code", "current"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Job)
class JobAdmin(ViewOnly, admin.ModelAdmin):
    list_display = ["job_id", "display_name", "workspace", "status", "source", "oversold_type", "priority", "created_at"]
    list_filter = ["status", "source", "oversold_type", "resource_type"]
    search_fields = ["job_id", "display_name"]
    inlines = [JobSpecInline, PodInline]
    exclude = ["custom_envs"]  # a CustomEnv's value that is not Visible is shown nowhere, here neither


@admin.register(Pod)
class PodAdmin(ViewOnly, admin.ModelAdmin):
    list_display = ["pod_id", "job", "node", "status", "sub_status", "kind", "exit_code"]
    list_filter = ["status", "sub_status", "kind"]
    search_fields = ["pod_id"]


class RecordAdmin(ViewOnly, admin.ModelAdmin):
    pass


for model in (JobEvent, PodEvent, StatusTransition, RestartRecord):
    admin.site.register(model, RecordAdmin)
