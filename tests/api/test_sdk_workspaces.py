"""The AIWorkspace 2021-02-04 actions (workspaces, datasets, code sources), driven through the
official alibabacloud_aiworkspace20210204 client against the live server. alice owns ml-research and
vision-lab, bob is a member of ml-research, charlie of nothing, mallory owns red-team in tenant acme."""

import pytest
from alibabacloud_aiworkspace20210204 import models as ws
from alibabacloud_aiworkspace20210204.client import Client as WorkspaceClient
from alibabacloud_tea_openapi.exceptions import ClientException

from datasets.models import Dataset
from tests.api.conftest import config, key_of


def workspace_client(endpoint, user) -> WorkspaceClient:
    return WorkspaceClient(config(endpoint, *key_of(user)))


@pytest.fixture
def alice_ws(endpoint, alice):
    return workspace_client(endpoint, alice)


@pytest.fixture
def bob_ws(endpoint, bob):
    return workspace_client(endpoint, bob)


@pytest.fixture
def charlie_ws(endpoint, charlie):
    return workspace_client(endpoint, charlie)


@pytest.fixture
def mallory_ws(endpoint, mallory):
    return workspace_client(endpoint, mallory)


def rejected(call) -> ClientException:
    with pytest.raises(ClientException) as info:
        call()
    return info.value


def create_dataset(client, workspace, **fields) -> str:
    body = {"WorkspaceId": str(workspace.pk), "Name": "mnist", "Uri": "file:///data/mnist",
            "DataSourceType": "FILE", "Property": "DIRECTORY", "Accessibility": "PUBLIC"}
    body.update(fields)
    return client.create_dataset(ws.CreateDatasetRequest().from_map(body)).body.dataset_id


def create_code_source(client, workspace, **fields) -> str:
    body = {"WorkspaceId": str(workspace.pk), "DisplayName": "trainer", "CodeRepo": "https://git.example.com/ml/trainer.git",
            "CodeBranch": "main", "Accessibility": "PUBLIC"}
    body.update(fields)
    return client.create_code_source(ws.CreateCodeSourceRequest().from_map(body)).body.code_source_id


# --- workspaces -------------------------------------------------------------------------------------

def workspace_names(client) -> set[str]:
    return {w.workspace_name for w in client.list_workspaces(ws.ListWorkspacesRequest()).body.workspaces}


def test_list_workspaces_shows_the_callers_memberships_only(alice_ws, bob_ws, charlie_ws, mallory_ws):
    assert workspace_names(alice_ws) == {"ml-research", "vision-lab"}
    assert workspace_names(bob_ws) == {"ml-research"}
    assert workspace_names(charlie_ws) == set()
    assert workspace_names(mallory_ws) == {"red-team"}


def test_get_workspace_answers_a_member_and_hides_it_from_everyone_else(alice_ws, bob_ws, mallory_ws, research, vision):
    body = alice_ws.get_workspace(str(research.pk), ws.GetWorkspaceRequest()).body
    assert (body.workspace_id, body.workspace_name, body.owner.user_name) == (str(research.pk), "ml-research", "alice")
    assert "alice" in body.admin_names

    for client, workspace in ((bob_ws, vision), (mallory_ws, research)):
        error = rejected(lambda: client.get_workspace(str(workspace.pk), ws.GetWorkspaceRequest()))
        assert (error.status_code, error.code) == (404, "EntityNotExist.Workspace")


# --- datasets ---------------------------------------------------------------------------------------

def test_a_created_dataset_is_read_back_with_its_uri_and_mount_path(alice_ws, research):
    dataset_id = create_dataset(alice_ws, research, Options='{"mountPath": "/mnt/mnist/"}', Description="digits")

    d = alice_ws.get_dataset(dataset_id, ws.GetDatasetRequest()).body
    assert (d.dataset_id, d.name, d.workspace_id, d.uri) == (dataset_id, "mnist", str(research.pk), "file:///data/mnist")
    assert (d.data_source_type, d.property, d.accessibility, d.description) == ("FILE", "DIRECTORY", "PUBLIC", "digits")
    assert d.options == '{"mountPath": "/mnt/mnist/"}'
    listed = alice_ws.list_datasets(ws.ListDatasetsRequest(workspace_id=str(research.pk))).body
    assert (listed.total_count, [x.dataset_id for x in listed.datasets]) == (1, [dataset_id])


def test_an_nfs_export_is_a_nas_dataset(alice_ws, research):
    dataset_id = create_dataset(alice_ws, research, Uri="nfs://nas1/export/imagenet", DataSourceType=None)

    assert alice_ws.get_dataset(dataset_id, ws.GetDatasetRequest()).body.data_source_type == "NAS"


@pytest.mark.parametrize("fields, field, says", [
    ({"Uri": "oss://bucket.oss-cn-hangzhou.aliyuncs.com/mnist/"}, "Uri", "file:///host/path or nfs://server/export/path"),
    ({"Uri": "file://relative/path"}, "Uri", "a host path has no host"),
    ({"DataSourceType": "OSS"}, "DataSourceType", "supported: FILE"),
    ({"Options": '{"mountPath": "mnt/data"}'}, "Options", "must be an absolute path"),
    ({"Options": "mountPath=/mnt"}, "Options", "must be a JSON object"),
    ({"Name": "-bad name"}, "Name", "1 to 127 letters"),
    ({"Property": "TABLE"}, "Property", "DIRECTORY, FILE"),
    ({"ImportInfo": '{"x": 1}'}, "ImportInfo", "is not supported"),
])
def test_a_dataset_that_cannot_be_mounted_is_refused_naming_the_field(alice_ws, research, fields, field, says):
    error = rejected(lambda: create_dataset(alice_ws, research, **fields))

    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert f"{field}: " in error.message and says in error.message
    assert not Dataset.objects.exists()


def test_a_dataset_needs_a_workspace_the_caller_may_write_to(charlie_ws, mallory_ws, research):
    for client in (charlie_ws, mallory_ws):
        error = rejected(lambda: create_dataset(client, research))
        assert error.code == "InvalidParameter" and "WorkspaceId: " in error.message


def test_datasets_are_walled_by_workspace_and_tenant(alice_ws, bob_ws, mallory_ws, research, vision):
    in_vision = create_dataset(alice_ws, vision, Name="faces")
    in_research = create_dataset(alice_ws, research)

    assert [d.dataset_id for d in bob_ws.list_datasets(ws.ListDatasetsRequest()).body.datasets] == [in_research]
    assert mallory_ws.list_datasets(ws.ListDatasetsRequest()).body.total_count == 0
    for client, dataset_id in ((bob_ws, in_vision), (mallory_ws, in_research)):
        for call in (lambda: client.get_dataset(dataset_id, ws.GetDatasetRequest()), lambda: client.delete_dataset(dataset_id, ws.DeleteDatasetRequest())):
            error = rejected(call)
            assert (error.status_code, error.code) == (404, "EntityNotExist.Dataset")
    assert Dataset.objects.count() == 2


def test_a_private_dataset_is_seen_by_its_owner_and_the_workspace_admins_only(alice_ws, bob_ws, research):
    private = create_dataset(alice_ws, research, Accessibility="PRIVATE")

    assert bob_ws.list_datasets(ws.ListDatasetsRequest()).body.total_count == 0
    assert rejected(lambda: bob_ws.get_dataset(private, ws.GetDatasetRequest())).code == "EntityNotExist.Dataset"
    assert alice_ws.get_dataset(private, ws.GetDatasetRequest()).body.accessibility == "PRIVATE"


def test_a_member_may_not_delete_someone_elses_dataset_but_its_owner_may(alice_ws, bob_ws, research):
    dataset_id = create_dataset(alice_ws, research)

    error = rejected(lambda: bob_ws.delete_dataset(dataset_id, ws.DeleteDatasetRequest()))
    assert (error.status_code, error.code) == (403, "NoPermission")
    alice_ws.delete_dataset(dataset_id, ws.DeleteDatasetRequest())
    assert rejected(lambda: alice_ws.get_dataset(dataset_id, ws.GetDatasetRequest())).code == "EntityNotExist.Dataset"


# --- code sources -----------------------------------------------------------------------------------

def test_a_created_code_source_is_read_back_listed_and_deleted(alice_ws, research):
    code_id = create_code_source(alice_ws, research, CodeCommit="0123abcd", MountPath="/root/code/trainer/")

    c = alice_ws.get_code_source(code_id, ws.GetCodeSourceRequest()).body
    assert (c.code_source_id, c.display_name, c.workspace_id) == (code_id, "trainer", str(research.pk))
    assert (c.code_repo, c.code_branch, c.code_commit, c.mount_path) == (
        "https://git.example.com/ml/trainer.git", "main", "0123abcd", "/root/code/trainer/")
    listed = alice_ws.list_code_sources(ws.ListCodeSourcesRequest(workspace_id=str(research.pk))).body
    assert [x.code_source_id for x in listed.code_sources] == [code_id]
    alice_ws.delete_code_source(code_id, ws.DeleteCodeSourceRequest())
    assert rejected(lambda: alice_ws.get_code_source(code_id, ws.GetCodeSourceRequest())).code == "EntityNotExist.CodeSource"


def test_a_code_source_mounts_under_root_code_by_default(alice_ws, research):
    code_id = create_code_source(alice_ws, research)

    assert alice_ws.get_code_source(code_id, ws.GetCodeSourceRequest()).body.mount_path == "/root/code/trainer"


@pytest.mark.parametrize("fields, field, says", [
    ({"CodeRepo": "--upload-pack=touch /tmp/x"}, "CodeRepo", "must be a git repository URL"),
    ({"CodeBranch": "-f"}, "CodeBranch", "must be a git branch name"),
    ({"CodeCommit": "HEAD~1"}, "CodeCommit", "7 to 64 hexadecimal digits"),
    ({"MountPath": "code"}, "MountPath", "must be an absolute path"),
    ({"CodeRepoAccessToken": "secret"}, "CodeRepoAccessToken", "is not supported"),
])
def test_a_code_source_that_cannot_be_cloned_is_refused_naming_the_field(alice_ws, research, fields, field, says):
    error = rejected(lambda: create_code_source(alice_ws, research, **fields))

    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert f"{field}: " in error.message and says in error.message
    assert "secret" not in error.message


def test_code_sources_are_walled_by_workspace_and_tenant(alice_ws, bob_ws, mallory_ws, research, vision):
    in_vision = create_code_source(alice_ws, vision)

    assert bob_ws.list_code_sources(ws.ListCodeSourcesRequest()).body.total_count == 0
    for client in (bob_ws, mallory_ws):
        error = rejected(lambda: client.get_code_source(in_vision, ws.GetCodeSourceRequest()))
        assert (error.status_code, error.code) == (404, "EntityNotExist.CodeSource")
        assert rejected(lambda: client.delete_code_source(in_vision, ws.DeleteCodeSourceRequest())).code == "EntityNotExist.CodeSource"
