"""A pod of the process runtime finds its datasets at their mount paths and its code source cloned
there before its command runs; a source that cannot be mounted or cloned fails the pod at once."""

import os
import signal
import subprocess

import pytest

from agent import procs
from agent.mounts import DatasetUri, nfs_local_path
from agent.outbox import Outbox
from agent.process import MARKER, ProcessExecutor
from tests.agent.helpers import Recorder, wait_for



@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "datasets" / "mnist"
    (root / "train").mkdir(parents=True)
    (root / "train" / "images.bin").write_text("pixels")
    (root / "labels.csv").write_text("0,1\n")
    return root


def pod(pod_id, command, *, job_id="job-1", data_sources=(), code_source=None):
    return {"pod_id": pod_id, "job_id": job_id, "node": "unit-node", "role": "Worker", "index": 0,
            "incarnation": 0, "command": command, "env": {}, "grace_s": 2, "executor": "process",
            "max_running_time_s": None, "data_sources": list(data_sources), "code_source": code_source}


def source(uri, mount_path, data_source_id="d-mnist"):
    return {"data_source_id": data_source_id, "uri": uri, "mount_path": str(mount_path)}


def ended(recorder, pod_id, timeout=20):
    return wait_for(lambda: recorder.final_report(pod_id), timeout)


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A git repository with two commits on main and a branch `exp` with a third."""
    path = tmp_path / "repo"
    path.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=path)
    (path / "train.py").write_text("print('version 1')\n")
    git("add", ".", cwd=path)
    first = git("commit", "--quiet", "-m", "one", cwd=path)
    (path / "train.py").write_text("print('version 2')\n")
    git("commit", "--quiet", "-am", "two", cwd=path)
    git("checkout", "--quiet", "-b", "exp", cwd=path)
    (path / "train.py").write_text("print('experiment')\n")
    git("commit", "--quiet", "-am", "three", cwd=path)
    git("checkout", "--quiet", "main", cwd=path)
    return {"url": f"file://{path}", "first": first}


def code(repo, mount_path, branch="", commit=""):
    return {"code_source_id": "code-1", "repo": repo["url"], "branch": branch, "commit": commit,
            "mount_path": str(mount_path)}


def test_a_dataset_on_a_host_path_is_listed_at_its_mount_path(executor, recorder, dataset, tmp_path):
    mnt = tmp_path / "mnt" / "data"
    executor.start(pod("p-ls", f"ls -R {mnt}/", data_sources=[source(f"file://{dataset}", mnt)]))

    assert ended(recorder, "p-ls")["status"] == "Succeeded"
    text = recorder.log_text("p-ls")
    assert "labels.csv" in text and "images.bin" in text


def test_the_link_is_removed_when_the_last_pod_using_it_ends(executor, recorder, dataset, tmp_path):
    mnt = tmp_path / "mnt" / "data"
    uri = f"file://{dataset}"
    executor.start(pod("p-a", "sleep 30", data_sources=[source(uri, mnt)]))
    executor.start(pod("p-b", "sleep 30", data_sources=[source(uri, mnt)]))
    assert os.readlink(mnt) == str(dataset)

    executor.stop("p-a", "Stopped", 1)
    ended(recorder, "p-a")
    assert os.readlink(mnt) == str(dataset)  # p-b still reads it
    executor.stop("p-b", "Stopped", 1)
    ended(recorder, "p-b")
    assert not os.path.lexists(mnt)
    assert (dataset / "labels.csv").exists()  # the data itself is untouched


def test_a_mount_path_taken_by_something_else_fails_the_pod_and_is_left_alone(executor, recorder, dataset, tmp_path):
    mnt = tmp_path / "mnt" / "data"
    mnt.mkdir(parents=True)
    (mnt / "mine.txt").write_text("keep me")
    executor.start(pod("p-busy", "echo ran", data_sources=[source(f"file://{dataset}", mnt)]))

    report = ended(recorder, "p-busy")
    assert (report["status"], report["reason"]) == ("Failed", "DataSourceMountFailed")
    assert f"{mnt} already exists on this node" in report["message"]
    assert (mnt / "mine.txt").read_text() == "keep me"
    assert "ran" not in recorder.log_text("p-busy")


def test_a_host_path_that_is_missing_fails_the_pod_naming_it(executor, recorder, tmp_path):
    executor.start(pod("p-missing", "true", data_sources=[source("file:///no/such/dir", tmp_path / "mnt")]))

    report = ended(recorder, "p-missing")
    assert report["reason"] == "DataSourceMountFailed"
    assert "/no/such/dir does not exist on this node" in report["message"]


def test_an_nfs_export_the_node_has_not_mounted_fails_the_pod_with_the_reason(executor, recorder, tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    executor.mounts_file = str(mounts)
    executor.start(pod("p-nfs", "true", data_sources=[source("nfs://nas1/export/mnist", tmp_path / "mnt")]))

    report = ended(recorder, "p-nfs")
    assert report["reason"] == "DataSourceMountFailed"
    assert "nfs://nas1/export/mnist is not mounted on this node" in report["message"]
    assert "does not mount NFS" in report["message"]


def test_an_nfs_export_the_node_has_mounted_is_linked_from_its_local_mount(executor, recorder, dataset, tmp_path):
    # The node mounted nas1:/export at <tmp>/datasets; the dataset is the export's mnist directory.
    mounts = tmp_path / "mounts"
    mounts.write_text(f"nas1:/export {dataset.parent} nfs4 rw,relatime 0 0\n")
    executor.mounts_file = str(mounts)
    mnt = tmp_path / "mnt" / "data"
    executor.start(pod("p-nfs-ok", f"cat {mnt}/labels.csv",
                       data_sources=[source("nfs://nas1/export/mnist", mnt)]))

    assert ended(recorder, "p-nfs-ok")["status"] == "Succeeded"
    assert "0,1" in recorder.log_text("p-nfs-ok")


def test_nfs_exports_resolve_through_the_deepest_mounted_export():
    table = "nas1:/ /net/nas1 nfs rw 0 0\nnas1:/export/big /mnt/big\\040disk nfs4 rw 0 0\nnas2:/export /x nfs rw 0 0\n"
    assert nfs_local_path(DatasetUri("nfs", "nas1", "/export/big/a"), table) == "/mnt/big disk/a"
    assert nfs_local_path(DatasetUri("nfs", "nas1", "/other"), table) == "/net/nas1/other"
    assert nfs_local_path(DatasetUri("nfs", "nas3", "/export"), table) is None


def test_the_code_source_is_cloned_at_its_branch_before_the_command_runs(executor, recorder, repo, tmp_path):
    mnt = tmp_path / "code" / "proj"
    executor.start(pod("p-code", f"python3 {mnt}/train.py", code_source=code(repo, mnt, branch="exp")))

    assert ended(recorder, "p-code")["status"] == "Succeeded"
    assert "experiment" in recorder.log_text("p-code")


def test_the_code_source_is_cloned_at_its_commit(executor, recorder, repo, tmp_path):
    mnt = tmp_path / "code" / "proj"
    executor.start(pod("p-commit", f"python3 {mnt}/train.py", code_source=code(repo, mnt, commit=repo["first"])))

    assert ended(recorder, "p-commit")["status"] == "Succeeded"
    assert "version 1" in recorder.log_text("p-commit")


def test_a_failed_clone_fails_the_pod_with_the_git_message(executor, recorder, repo, tmp_path):
    mnt = tmp_path / "code" / "proj"
    executor.start(pod("p-nobranch", "echo ran", code_source=code(repo, mnt, branch="no-such-branch")))

    report = ended(recorder, "p-nobranch")
    assert (report["status"], report["reason"]) == ("Failed", "CodeSourceCloneFailed")
    assert "no-such-branch" in report["message"] and "not found" in report["message"]
    assert not os.path.lexists(mnt)


def test_a_restarted_agent_removes_the_link_of_an_adopted_pod_when_it_ends(tmp_path, dataset):
    mnt = tmp_path / "mnt" / "data"
    made = []

    def make():
        recorder = Recorder()
        outbox = Outbox(recorder, flush_s=0.02)
        ex = ProcessExecutor("unit-node", tmp_path / "pods", outbox, ship_interval_s=0.1)
        made.append((ex, outbox))
        ex.run()
        return ex, recorder

    try:
        first, _ = make()
        first.start(pod("p-adopted", "sleep 30", data_sources=[source(f"file://{dataset}", mnt)]))
        first.close()  # the agent goes away; the pod and its link stay

        second, recorder = make()
        assert second.running_pod_ids() == ["p-adopted"] and os.readlink(mnt) == str(dataset)
        second.stop("p-adopted", "Stopped", 1)
        ended(recorder, "p-adopted")
        assert not os.path.lexists(mnt)
    finally:
        for ex, outbox in made:
            ex.close()
            outbox.close()
        for pgid in procs.groups_with_env(MARKER, made[0][0].marker):
            procs.signal_group(pgid, signal.SIGKILL)
