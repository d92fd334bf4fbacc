"""Who may see what: alice owns both workspaces (and is the quota admin), bob is a member of
ml-research only, charlie belongs to no workspace."""

import pytest

from cycle import tasks as cycle_tasks
from quotas.models import Quota
from tests.console.conftest import quota_job

pytestmark = pytest.mark.django_db


def test_anonymous_visitors_are_sent_to_the_login_page(client, demo_cluster):
    response = client.get("/jobs/")
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_charlie_gets_404_on_every_page_of_alices_job(charlie_client, alice):
    job = quota_job(alice)
    for url in (f"/jobs/{job.job_id}/", f"/jobs/{job.job_id}/logs/?pod={job.job_id}-worker-0"):
        assert charlie_client.get(url).status_code == 404
    assert charlie_client.post(f"/jobs/{job.job_id}/stop/").status_code == 404
    job.refresh_from_db()
    assert job.status == "Queuing"


def test_charlie_cannot_clone_alices_job(charlie_client, alice):
    job = quota_job(alice, "secret-run")
    response = charlie_client.get(f"/jobs/create/?clone={job.job_id}")
    assert b"secret-run" not in response.content


def test_bob_sees_alices_job_in_their_shared_workspace(bob_client, alice):
    job = quota_job(alice, "shared-run")
    assert b"shared-run" in bob_client.get("/jobs/").content
    assert bob_client.get(f"/jobs/{job.job_id}/").status_code == 200


def test_bob_gets_404_on_a_job_of_a_workspace_he_is_not_in(bob_client, alice):
    job = quota_job(alice, "vision-run", quota="cv-team", workspace="vision-lab")
    assert bob_client.get(f"/jobs/{job.job_id}/").status_code == 404


def test_bob_cannot_switch_to_a_workspace_he_is_not_a_member_of(bob_client, alice):
    quota_job(alice, "vision-run", quota="cv-team", workspace="vision-lab")
    vision = alice.workspaces.get(name="vision-lab")
    bob_client.post("/workspace/", {"workspace": vision.pk, "next": "/jobs/"})
    assert b"vision-run" not in bob_client.get("/jobs/").content


def test_alice_switches_workspace_and_sees_its_jobs(alice_client, alice):
    quota_job(alice, "vision-run", quota="cv-team", workspace="vision-lab")
    assert b"vision-run" not in alice_client.get("/jobs/").content  # default: ml-research
    vision = alice.workspaces.get(name="vision-lab")
    response = alice_client.post("/workspace/", {"workspace": vision.pk, "next": "/jobs/"})
    assert response.status_code == 302
    assert b"vision-run" in alice_client.get("/jobs/").content


@pytest.mark.parametrize("url", ["/quotas/new/", "/quotas/quota00000002/edit/"])
def test_quota_admin_pages_are_forbidden_to_members_and_outsiders(bob_client, charlie, client, url):
    assert bob_client.get(url).status_code == 403
    client.force_login(charlie)
    assert client.get(url).status_code == 403


def test_bob_cannot_create_a_quota_by_posting(bob_client):
    response = bob_client.post("/quotas/new/", {"name": "sneaky", "resource_type": "ECS", "queue_strategy": "BestEffort",
                                                 "min_runtime_before_preemption_s": 0})
    assert response.status_code == 403
    assert not Quota.objects.filter(name="sneaky").exists()


def test_the_nodes_page_lists_pod_names_only_for_staff(bob_client, alice, client):

    job = quota_job(alice, "busy")
    cycle_tasks.process_cycle.run()
    pod_id = f"{job.job_id}-worker-0"
    assert pod_id.encode() not in bob_client.get("/nodes/").content
    client.force_login(alice)
    assert pod_id.encode() in client.get("/nodes/").content
