"""Create Job offers the workspace's datasets and code source; the job page shows what the pods mount."""

import pytest
from django.test import Client

from datasets.models import CodeSource, Dataset
from jobs.models import Job
from quotas.models import Workspace
from tests.console.test_create_job import field_error, form_data

pytestmark = pytest.mark.django_db


def dataset(owner, workspace, name, access="PUBLIC"):
    return Dataset.objects.create(dataset_id=f"d-{name}", workspace=Workspace.objects.get(name=workspace), owner=owner,
                                  name=name, uri=f"file:///data/{name}", data_source_type="FILE",
                                  mount_path=f"/mnt/{name}", accessibility=access)


@pytest.fixture
def sources(alice):
    dataset(alice, "ml-research", "mnist")
    dataset(alice, "ml-research", "secret", access="PRIVATE")
    dataset(alice, "vision-lab", "faces")
    CodeSource.objects.create(code_source_id="code-trainer", workspace=Workspace.objects.get(name="ml-research"),
                              owner=alice, display_name="trainer", code_repo="https://git.example.com/t.git",
                              code_branch="main", mount_path="/root/code/trainer", accessibility="PUBLIC")


def create_page(user) -> str:
    client = Client()
    client.force_login(user)
    return client.get("/jobs/create/").content.decode()


def test_the_form_offers_the_datasets_of_the_workspace_the_user_sees(alice, bob, sources):
    alice_page, bob_page = create_page(alice), create_page(bob)

    assert 'value="d-mnist"' in alice_page and 'value="d-secret"' in alice_page and 'value="code-trainer"' in alice_page
    assert 'value="d-faces"' not in alice_page  # vision-lab's, not this workspace's
    assert 'value="d-mnist"' in bob_page and 'value="d-secret"' not in bob_page  # alice's private one


def test_a_job_created_with_a_dataset_and_code_source_shows_them_on_its_page(alice_client, sources):
    response = alice_client.post("/jobs/create/", form_data(datasets="d-mnist", code_source="code-trainer"))

    job = Job.objects.get(display_name="bert-pretrain")
    assert response.status_code == 302
    assert job.data_sources == [{"data_source_id": "d-mnist", "uri": "file:///data/mnist", "mount_path": "/mnt/mnist"}]
    assert job.code_source["repo"] == "https://git.example.com/t.git"
    page = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "/mnt/mnist" in page and "file:///data/mnist" in page and "/root/code/trainer" in page


def test_a_dataset_of_another_workspace_is_refused_next_to_the_field(alice_client, sources):
    response = alice_client.post("/jobs/create/", form_data(datasets="d-faces"))

    assert response.status_code == 200 and not Job.objects.exists()
    assert "d-faces" in field_error(response.content.decode(), "id_datasets")


def test_clone_keeps_the_datasets_and_code_source(alice_client, sources):
    alice_client.post("/jobs/create/", form_data(datasets="d-mnist", code_source="code-trainer"))
    job = Job.objects.get()

    page = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    assert "checked" in page.split('value="d-mnist"')[1].split(">")[0]
    assert 'value="code-trainer" selected' in page
