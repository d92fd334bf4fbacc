"""CreateJob's DataSources and CodeSource, through the official DLC client: a job mounts registered
datasets and a code source of its own workspace, GetJob and ListJobs show them, and the start
message carries them to the agent; anything else is refused naming the field."""

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc

from cycle.schedule import ScheduleCycle
from datasets.models import CodeSource, Dataset
from jobs.models import Job
from tests.api.test_sdk_jobs import create, rejected


@pytest.fixture
def mnist(alice, research):
    return Dataset.objects.create(dataset_id="d-mnist", workspace=research, owner=alice, name="mnist",
                                  uri="file:///data/mnist", data_source_type="FILE", mount_path="/mnt/data/",
                                  accessibility="PUBLIC")


@pytest.fixture
def faces(alice, vision):
    return Dataset.objects.create(dataset_id="d-faces", workspace=vision, owner=alice, name="faces",
                                  uri="nfs://nas1/export/faces", data_source_type="NAS", mount_path="/mnt/faces",
                                  accessibility="PUBLIC")


@pytest.fixture
def trainer(alice, research):
    return CodeSource.objects.create(code_source_id="code-trainer", workspace=research, owner=alice,
                                     display_name="trainer", code_repo="https://git.example.com/trainer.git",
                                     code_branch="main", code_commit="", mount_path="/root/code/trainer",
                                     accessibility="PUBLIC")


def test_a_job_mounts_its_datasets_and_code_source_and_get_job_shows_them(alice_dlc, research, mnist, trainer):
    job_id = create(alice_dlc, WorkspaceId=str(research.pk),
                    DataSources=[{"DataSourceId": "d-mnist", "MountPath": "/mnt/mnist/"}],
                    CodeSource={"CodeSourceId": "code-trainer", "Commit": "0123abcd"})

    job = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body
    ((source,),) = [job.data_sources]
    assert (source.data_source_id, source.mount_path, source.uri) == ("d-mnist", "/mnt/mnist", "file:///data/mnist")
    code = job.code_source
    assert (code.code_source_id, code.branch, code.commit, code.mount_path) == (
        "code-trainer", "main", "0123abcd", "/root/code/trainer")
    (item,) = alice_dlc.list_jobs(dlc.ListJobsRequest()).body.jobs
    assert [d.data_source_id for d in item.data_sources] == ["d-mnist"] and item.code_source.code_source_id == "code-trainer"


def test_a_dataset_without_a_mount_path_mounts_where_the_dataset_says(alice_dlc, research, mnist):
    job_id = create(alice_dlc, WorkspaceId=str(research.pk), DataSources=[{"DataSourceId": "d-mnist"}])

    assert alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.data_sources[0].mount_path == "/mnt/data"


def test_the_start_message_carries_the_sources_to_the_agent(alice_dlc, research, mnist, trainer, monkeypatch):
    from jobs import dispatch

    sent = []
    monkeypatch.setattr(dispatch, "send", lambda messages: sent.extend(messages))
    job_id = create(alice_dlc, WorkspaceId=str(research.pk), DataSources=[{"DataSourceId": "d-mnist"}],
                    CodeSource={"CodeSourceId": "code-trainer"})
    ScheduleCycle().run()

    (message,) = [m for m in sent if m.task == dispatch.START_POD and m.payload["job_id"] == job_id]
    assert message.payload["data_sources"] == [
        {"data_source_id": "d-mnist", "uri": "file:///data/mnist", "mount_path": "/mnt/data"}]
    assert message.payload["code_source"] == {"code_source_id": "code-trainer", "repo": "https://git.example.com/trainer.git",
                                              "branch": "main", "commit": "", "mount_path": "/root/code/trainer"}


def test_a_dataset_of_another_workspace_or_tenant_is_refused_as_unknown(alice_dlc, mallory, research, faces):
    red = Dataset.objects.create(dataset_id="d-red", workspace=mallory.workspaces.get(), owner=mallory, name="red",
                                 uri="file:///red", data_source_type="FILE", mount_path="/mnt/red",
                                 accessibility="PUBLIC")
    for dataset in (faces, red):
        error = rejected(lambda: create(alice_dlc, WorkspaceId=str(research.pk),
                                        DataSources=[{"DataSourceId": dataset.dataset_id}]))
        assert error.code == "InvalidParameter"
        assert f"DataSources[0].DataSourceId: dataset '{dataset.dataset_id}' does not exist in the job's workspace" \
            in error.message
    assert not Job.objects.exists()


def test_a_private_dataset_of_someone_else_is_refused_as_unknown(bob, research, mnist, endpoint):
    from tests.api.conftest import dlc_client, key_of

    Dataset.objects.filter(pk=mnist.pk).update(accessibility="PRIVATE")
    error = rejected(lambda: create(dlc_client(endpoint, *key_of(bob)), WorkspaceId=str(research.pk),
                                    DataSources=[{"DataSourceId": "d-mnist"}]))
    assert "DataSources[0].DataSourceId: dataset 'd-mnist' does not exist" in error.message


@pytest.mark.parametrize("fields, says", [
    ({"DataSources": [{"DataSourceId": "d-mnist", "MountPath": "mnt/data"}]},
     "DataSources[0].MountPath: must be an absolute path"),
    ({"DataSources": [{"DataSourceId": "d-mnist", "MountPath": "/mnt/a"},
                      {"DataSourceId": "d-mnist", "MountPath": "/mnt/a/"}]},
     "DataSources[1].MountPath: /mnt/a is also another source's mount path"),
    ({"DataSources": [{"DataSourceId": "d-mnist", "MountPath": "/work"}],
      "CodeSource": {"CodeSourceId": "code-trainer", "MountPath": "/work/code"}},
     "CodeSource.MountPath: /work/code and /work lie one inside the other"),
    ({"DataSources": [{"DataSourceId": "d-mnist", "EnableCache": True}]},
     "DataSources[0].EnableCache: is not supported"),
    ({"DataSources": [{"DataSourceId": "d-mnist", "Uri": "file:///etc"}]},
     "DataSources[0].Uri: must be the dataset's URI file:///data/mnist or a path inside it"),
    ({"DataSources": [{"MountPath": "/mnt/x"}]}, "DataSources[0].DataSourceId: is required"),
    ({"CodeSource": {"CodeSourceId": "code-nope"}},
     "CodeSource.CodeSourceId: code source 'code-nope' does not exist in the job's workspace"),
    ({"CodeSource": {"CodeSourceId": "code-trainer", "Branch": "--force"}}, "CodeSource.Branch: must be a git branch"),
])
def test_sources_a_job_cannot_mount_are_refused_naming_the_field(alice_dlc, research, mnist, trainer, fields, says):
    error = rejected(lambda: create(alice_dlc, WorkspaceId=str(research.pk), **fields))

    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert says in error.message
    assert not Job.objects.exists()


def test_a_subdirectory_of_a_dataset_may_be_mounted(alice_dlc, research, mnist):
    job_id = create(alice_dlc, WorkspaceId=str(research.pk),
                    DataSources=[{"DataSourceId": "d-mnist", "Uri": "file:///data/mnist/train"}])

    assert alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.data_sources[0].uri == "file:///data/mnist/train"
