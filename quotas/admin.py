from django.contrib import admin

from quotas.models import AgentCredential, Membership, Node, Quota, ResourceSpec, Tenant, Workspace


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "created_at"]
    inlines = [MembershipInline]


@admin.register(ResourceSpec)
class ResourceSpecAdmin(admin.ModelAdmin):
    list_display = ["instance_type", "resource_type", "cpu", "memory_mib", "gpu", "gpu_type", "on_demand_price_per_minute"]
    list_filter = ["resource_type"]


class NodeInline(admin.TabularInline):
    model = Node
    fields = ["name", "spec", "status", "executor"]
    extra = 0


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["name", "quota_id", "resource_type", "parent", "queue_strategy", "tenant"]
    list_filter = ["resource_type", "tenant"]
    filter_horizontal = ["workspaces"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "spec", "quota", "status", "executor", "last_heartbeat"]
    list_filter = ["status", "executor", "quota", "spec"]
    search_fields = ["name", "hostname"]


@admin.register(AgentCredential)
class AgentCredentialAdmin(admin.ModelAdmin):
    """Issued with `manage.py register_node`; deleting one revokes the agent's join token."""

    list_display = ("name", "quota", "created_at")
    fields = ("name", "quota", "created_at")
    readonly_fields = ("name", "created_at")

    def has_add_permission(self, request):
        return False  # a token is shown once, by register_node
