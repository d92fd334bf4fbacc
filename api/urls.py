"""Routes of the SDK actions (docs/api-map.md) and of the OpenAPI description.

Each route matches with and without a trailing slash: the SDK sends `GET /api/v1/quotas/` but
`POST /api/v1/quotas`, and a redirect (APPEND_SLASH) would break the request's signature.
Path parameters are one segment; the SDK percent-encodes a '/' inside them.
"""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from apikit.docs import api_docs
from apikit.schema import SdkSchemaGenerator
from apikit.views import unknown_api_path
from api import cluster, jobs, metrics, quotas, spot, workspaces


def action(route: str, view, name: str):
    return re_path(rf"^api/v1/{route}/?$", view.as_view(), name=name)


SEG = r"(?P<{}>[^/]+)"

urlpatterns = [
    # DLC 2020-12-03
    action("jobs", jobs.JobsView, "dlc-jobs"),
    action(f"jobs/{SEG.format('job_id')}", jobs.JobView, "dlc-job"),
    action(f"jobs/{SEG.format('job_id')}/stop", jobs.StopJobView, "dlc-job-stop"),
    action(f"jobs/{SEG.format('job_id')}/events", jobs.JobEventsView, "dlc-job-events"),
    action(f"jobs/{SEG.format('job_id')}/pods/{SEG.format('pod_id')}/logs", jobs.PodLogsView, "dlc-pod-logs"),
    action(f"jobs/{SEG.format('job_id')}/pods/{SEG.format('pod_id')}/events", jobs.PodEventsView, "dlc-pod-events"),
    action("ecsspecs", spot.EcsSpecsView, "dlc-ecs-specs"),
    # PaiStudio 2022-01-12
    action("quotas", quotas.QuotasView, "studio-quotas"),
    action(f"quotas/{SEG.format('quota_id')}", quotas.QuotaView, "studio-quota"),
    action(f"quotas/{SEG.format('quota_id')}/workloads", quotas.QuotaWorkloadsView, "studio-quota-workloads"),
    action("nodes", quotas.NodesView, "studio-nodes"),
    action(f"spots/{SEG.format('instance_type')}/pricehistory", spot.SpotPriceHistoryView, "studio-price-history"),
    # AIWorkspace 2021-02-04
    action("workspaces", workspaces.WorkspacesView, "aiworkspace-workspaces"),
    action(f"workspaces/{SEG.format('workspace_id')}", workspaces.WorkspaceView, "aiworkspace-workspace"),
    action("datasets", workspaces.DatasetsView, "aiworkspace-datasets"),
    action(f"datasets/{SEG.format('dataset_id')}", workspaces.DatasetView, "aiworkspace-dataset"),
    action("codesources", workspaces.CodeSourcesView, "aiworkspace-code-sources"),
    action(f"codesources/{SEG.format('code_source_id')}", workspaces.CodeSourceView, "aiworkspace-code-source"),
    # DLC GetJobMetrics (api/metrics.py) and PaiStudio admin actions on the cluster (api/cluster.py)
    action(f"jobs/{SEG.format('job_id')}/metrics", metrics.JobMetricsView, "dlc-job-metrics"),
    action(f"quotas/{SEG.format('quota_id')}/action/scale", cluster.ScaleQuotaView, "studio-quota-scale"),
    action(f"quotas/{SEG.format('quota_id')}/activeuserusages", cluster.QuotaActiveUserUsagesView,
           "studio-quota-user-usages"),
    action("resources", cluster.ResourceGroupsView, "studio-resource-groups"),
    action(f"resources/{SEG.format('group_id')}", cluster.ResourceGroupView, "studio-resource-group"),
    action("nodetypes", cluster.NodeTypesView, "studio-node-types"),
    action(f"nodes/{SEG.format('node_id')}", cluster.NodeView, "studio-node"),
    action(f"nodes/{SEG.format('node_id')}/Pods", cluster.NodePodsView, "studio-node-pods"),
    re_path(r"^api/v1/", unknown_api_path),
    # The description of all of the above.
    path("api/schema/", SpectacularAPIView.as_view(generator_class=SdkSchemaGenerator), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
]
