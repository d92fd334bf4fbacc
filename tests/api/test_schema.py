"""The OpenAPI description served by the app lists every SDK action at the SDK's path."""

import pytest
import yaml

ACTIONS = {
    ("/api/v1/jobs", "post"): "CreateJob", ("/api/v1/jobs", "get"): "ListJobs",
    ("/api/v1/jobs/{job_id}", "get"): "GetJob", ("/api/v1/jobs/{job_id}", "put"): "UpdateJob",
    ("/api/v1/jobs/{job_id}", "delete"): "DeleteJob", ("/api/v1/jobs/{job_id}/stop", "post"): "StopJob",
    ("/api/v1/jobs/{job_id}/events", "get"): "GetJobEvents",
    ("/api/v1/jobs/{job_id}/pods/{pod_id}/logs", "get"): "GetPodLogs",
    ("/api/v1/jobs/{job_id}/pods/{pod_id}/events", "get"): "GetPodEvents",
    ("/api/v1/ecsspecs", "get"): "ListEcsSpecs",
    ("/api/v1/quotas", "post"): "CreateQuota", ("/api/v1/quotas", "get"): "ListQuotas",
    ("/api/v1/quotas/{quota_id}", "get"): "GetQuota", ("/api/v1/quotas/{quota_id}", "put"): "UpdateQuota",
    ("/api/v1/quotas/{quota_id}", "delete"): "DeleteQuota", ("/api/v1/nodes", "get"): "ListNodes",
    ("/api/v1/quotas/{quota_id}/workloads", "get"): "ListQuotaWorkloads",
    ("/api/v1/spots/{instance_type}/pricehistory", "get"): "GetSpotPriceHistory",
    ("/api/v1/workspaces", "get"): "ListWorkspaces", ("/api/v1/workspaces/{workspace_id}", "get"): "GetWorkspace",
    ("/api/v1/datasets", "post"): "CreateDataset", ("/api/v1/datasets", "get"): "ListDatasets",
    ("/api/v1/datasets/{dataset_id}", "get"): "GetDataset", ("/api/v1/datasets/{dataset_id}", "delete"): "DeleteDataset",
    ("/api/v1/codesources", "post"): "CreateCodeSource", ("/api/v1/codesources", "get"): "ListCodeSources",
    ("/api/v1/codesources/{code_source_id}", "get"): "GetCodeSource",
    ("/api/v1/codesources/{code_source_id}", "delete"): "DeleteCodeSource",
    ("/api/v1/quotas/{quota_id}/action/scale", "put"): "ScaleQuota",
    ("/api/v1/quotas/{quota_id}/activeuserusages", "get"): "ListQuotaActiveUserUsages",
    ("/api/v1/resources", "get"): "ListResourceGroups", ("/api/v1/resources/{group_id}", "get"): "GetResourceGroup",
    ("/api/v1/nodetypes", "get"): "ListNodeTypes", ("/api/v1/nodes/{node_id}", "post"): "OperateNode",
    ("/api/v1/nodes/{node_id}/Pods", "get"): "ListNodePods",
    ("/api/v1/jobs/{job_id}/metrics", "get"): "GetJobMetrics",
}


@pytest.mark.django_db
def test_the_schema_lists_every_action_at_its_sdk_path(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    found = {(path, method): op["operationId"] for path, item in schema["paths"].items()
             for method, op in item.items() if path.startswith("/api/v1/")}
    assert found == ACTIONS
    assert "ACS3-HMAC-SHA256" in schema["components"]["securitySchemes"]
    list_jobs = schema["paths"]["/api/v1/jobs"]["get"]
    assert {"Status", "OversoldInfo", "PaymentType", "PageSize"} <= {p["name"] for p in list_jobs["parameters"]}


@pytest.mark.django_db
def test_the_docs_page_shows_the_actions(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert b"CreateJob" in response.content and b"/api/v1/spots/{instance_type}/pricehistory" in response.content
