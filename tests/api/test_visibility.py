from jobs import services
from jobs.models import Job
from quotas.models import Membership, Role


def test_a_user_sees_the_jobs_of_every_workspace_they_belong_to_and_no_other(alice, bob, charlie, research, vision):
    Membership.objects.create(workspace=vision, user=charlie, role=Role.VIEWER)
    for n, workspace in enumerate((research, vision, research)):
        Job.objects.create(job_id=f"dlc-v{n}", workspace=workspace, user=alice, display_name="x", user_command="x")

    assert {j.job_id for j in services.visible_jobs(alice)} == {"dlc-v0", "dlc-v1", "dlc-v2"}
    assert {j.job_id for j in services.visible_jobs(bob)} == {"dlc-v0", "dlc-v2"}
    assert {j.job_id for j in services.visible_jobs(charlie)} == {"dlc-v1"}  # viewers read too
