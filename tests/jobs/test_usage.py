from django.db import connection
from django.test.utils import CaptureQueriesContext

from api.quotas import QuotaTree
from jobs.services import create_job
from jobs.usage import usage_by_quota
from quotas.models import Node, Quota, Workspace
from scheduler import Resources
from tests.jobs.conftest import CV, make_request

NODE = Resources(8, 64000, 256 * 1024)
LINGJUN = "ml.gu7xf.c96m1600.8-gu108"


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


def test_a_lingjun_quota_lends_to_another_root_quota_of_its_tenant(alice, cycle):
    finetune = {"resource_type": "Lingjun", "instance_type": LINGJUN, "quota_id": "quota00000005",
                "workspace_id": Workspace.objects.get(name="vision-lab").pk}
    create_job(alice, make_request(pods=1, **finetune))
    create_job(alice, make_request(pods=1, oversold_type="ForceQuotaOverSold", **finetune))
    cycle()
    usage = {Quota.objects.get(pk=pk).name: u for pk, u in usage_by_quota().items()}
    lingjun_node = Resources(8, 96000, 1600 * 1024)
    assert usage["llm-finetune"].guaranteed_used == usage["llm-finetune"].borrowed == lingjun_node
    assert usage["llm-pretrain"].lent == lingjun_node and usage["llm-pretrain"].guaranteed_used == Resources()


def test_the_quotas_page_and_list_quotas_read_usage_in_as_many_queries_for_fifteen_quotas_as_for_five(
        alice, bob, client, cycle):
    create_job(bob, make_request(pods=1, oversold_type="ForceQuotaOverSold"))
    cycle()
    client.force_login(alice)
    few = queries_to_show_every_quota(client)
    platform = Quota.objects.get(name="ml-platform")
    for i, node in enumerate(Node.objects.filter(quota=None).order_by("pk")[:10]):
        node.quota = Quota.objects.create(quota_id=f"quota-extra-{i}", name=f"extra-{i}", tenant=platform.tenant,
                                          parent=platform)
        node.save()
    assert queries_to_show_every_quota(client) == few


def queries_to_show_every_quota(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/quotas/").status_code == 200
        quotas = list(Quota.objects.select_related("parent"))
        tree = QuotaTree(quotas)  # what ListQuotas shapes
        assert len([tree.shape(quota) for quota in quotas]) == Quota.objects.count()
    return len(queries)
