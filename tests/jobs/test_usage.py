from jobs.services import create_job
from jobs.usage import usage_by_quota
from quotas.models import Quota, Workspace
from scheduler import Resources
from tests.jobs.conftest import CV, make_request

NODE = Resources(8, 64000, 256 * 1024)


def twice(r):
    return r + r


def test_it_shows_guarantee_use_lending_and_borrowing_per_quota(alice, bob, cycle):
    create_job(bob, make_request(pods=2))
    create_job(bob, make_request(pods=1, oversold_type="AcceptQuotaOverSold"))
    create_job(alice, make_request(pods=1, workspace_id=Workspace.objects.get(name="vision-lab").pk, quota_id=CV))
    cycle()
    usage = {Quota.objects.get(pk=pk).name: u for pk, u in usage_by_quota().items()}
    nlp, cv, platform = usage["nlp-team"], usage["cv-team"], usage["ml-platform"]
    assert nlp.capacity == twice(NODE) and nlp.guaranteed_used == twice(NODE) and nlp.guaranteed_free == Resources()
    assert nlp.borrowed == NODE and nlp.lent == Resources()
    assert cv.guaranteed_used == NODE and cv.lent == NODE and cv.borrowed == Resources()
    # The parent counts its sub-quotas; borrowing inside its own tree is neither lent nor borrowed.
    assert platform.capacity == twice(twice(NODE)) and platform.guaranteed_used == NODE + twice(NODE)
    assert platform.lent == platform.borrowed == Resources()
    assert usage["llm-pretrain"].guaranteed_used == Resources()
