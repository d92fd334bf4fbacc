"""End to end: the seed's own command (`ls -R /mnt/data/`) lists a registered dataset, and the job's
code source is cloned before it runs, through a real platform worker and a real agent."""

import os
import subprocess

import pytest

from datasets.models import CodeSource, Dataset
from datasets.services import JobCodeSource, JobDataSource
from jobs.logs import read_all
from jobs.models import Pod
from jobs.services import JobRequest, RoleRequest, create_job
from tests.agent.test_e2e import live, registered, status, team  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SEED_COMMAND = "echo 'Hello World' && ls -R /mnt/data/ && python3 {code}/train.py && echo 'DONE'"


def git_repo(path):
    path.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    (path / "train.py").write_text("print('training from the code source')\n")
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "."], ["commit", "--quiet", "-m", "one"]):
        subprocess.run(["git", *args], cwd=path, check=True, env=env)


def test_the_seed_command_lists_the_dataset_mounted_at_mnt_data_and_runs_the_cloned_code(live, team, tmp_path):
    # The process runtime links /mnt/data on this machine for the pod's life; it must be free.
    assert not os.path.lexists("/mnt/data"), "/mnt/data exists on this machine; this test mounts a dataset there"
    data = tmp_path / "mnist"
    (data / "train").mkdir(parents=True)
    (data / "train" / "images-0001.bin").write_text("pixels")
    (data / "labels.csv").write_text("0,1\n")
    git_repo(tmp_path / "repo")
    workspace = team["a"].workspaces.get()
    Dataset.objects.create(dataset_id="d-mnist", workspace=workspace, owner=team["alice"], name="mnist",
                           uri=f"file://{data}", data_source_type="FILE", mount_path="/mnt/data/")
    CodeSource.objects.create(code_source_id="code-1", workspace=workspace, owner=team["alice"],
                              display_name="trainer", code_repo=f"file://{tmp_path / 'repo'}", code_branch="main",
                              mount_path=str(tmp_path / "code"))
    live.start_platform()
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the agent to register")

    job = create_job(team["alice"], JobRequest(
        display_name="sample-job", user_command=SEED_COMMAND.format(code=tmp_path / "code"),
        quota_id=team["a"].quota_id, roles=[RoleRequest(instance_type="e2e.c1m1g2", image="local")],
        data_sources=[JobDataSource("d-mnist", "/mnt/data/")], code_source=JobCodeSource("code-1"),
    ))
    live.wait(lambda: status(job) in ("Succeeded", "Failed"), "the job to end")

    pod = Pod.objects.get(job=job)
    text = live.wait(lambda: read_all(pod), "the pod's log")
    assert status(job) == "Succeeded", (pod.reason_code, pod.reason_message, text)
    assert "Hello World" in text and "/mnt/data/:" in text and "labels.csv" in text
    assert "/mnt/data/train:" in text and "images-0001.bin" in text
    assert "training from the code source" in text and text.rstrip().endswith("DONE")
    assert not os.path.lexists("/mnt/data")  # the link went with the pod


def test_an_nfs_dataset_the_node_has_not_mounted_fails_the_pod_with_the_reason(live, team, tmp_path):
    workspace = team["a"].workspaces.get()
    Dataset.objects.create(dataset_id="d-nfs", workspace=workspace, owner=team["alice"], name="imagenet",
                           uri="nfs://nas.invalid/export/imagenet", data_source_type="NAS",
                           mount_path=str(tmp_path / "imagenet"))
    live.start_platform()
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the agent to register")

    job = create_job(team["alice"], JobRequest(
        display_name="nfs-job", user_command="echo ran", quota_id=team["a"].quota_id,
        roles=[RoleRequest(instance_type="e2e.c1m1g2", image="local")], data_sources=[JobDataSource("d-nfs")],
    ))
    live.wait(lambda: status(job) == "Failed", "the job to fail")

    pod = Pod.objects.get(job=job)
    assert (pod.status, pod.reason_code) == ("Failed", "DataSourceMountFailed")
    assert "nfs://nas.invalid/export/imagenet is not mounted on this node" in pod.reason_message
    assert read_all(pod) == ""  # the command never ran
