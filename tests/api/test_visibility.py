from jobs import api, services
from jobs.models import Job
from quotas.models import Membership, Role


def test_the_api_sees_exactly_the_jobs_the_services_let_a_user_see(alice, bob, charlie, research, vision):
    Membership.objects.create(workspace=vision, user=charlie, role=Role.VIEWER)
    for n, workspace in enumerate((research, vision, research)):
        Job.objects.create(job_id=f"dlc-v{n}", workspace=workspace, user=alice, display_name="x", user_command="x")

    for user in (alice, bob, charlie):
        assert set(api.visible_jobs(user)) == set(services.visible_jobs(user))
    assert {j.job_id for j in api.visible_jobs(bob)} == {"dlc-v0", "dlc-v2"}
