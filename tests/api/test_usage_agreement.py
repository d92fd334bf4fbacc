"""One cluster, one account of its usage: the console's Quotas page, ListQuotas, GetQuota, ListNodes,
jobs.usage and the scheduler's own quota tree report the same guaranteed use, lending and borrowing.

nlp-team fills its guarantee (2 pods of 8 GPUs) and borrows cv-team's idle GPUs with three idle
pods of 4; cv-team's own guaranteed job holds 4 GPUs. Both are sub-quotas of ml-platform, so the
borrowing stays inside ml-platform's tree: the parent neither lends nor borrows. One borrower's
pod is Unknown (its node missed heartbeats): it holds its GPUs until it is failed.
"""

from html.parser import HTMLParser

import pytest
from alibabacloud_paistudio20220112 import models as studio

from cycle import snapshot
from cycle import tasks as cycle_tasks
from jobs import dispatch
from jobs.models import Pod, PodKind, PodResources
from jobs.services import JobRequest, RoleRequest, create_job
from jobs.states import PodStatus
from jobs.usage import usage_by_quota
from quotas.models import Quota, Workspace
from scheduler import Resources
from scheduler.quota_tree import QuotaTree

V100 = "ecs.gn6v-c8g1.16xlarge"  # 8 GPUs, 64 vCPUs, 256 GiB
QUARTER = PodResources(gpu=4, cpu=16, memory_mib=64 * 1024)
GiB = 1024


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """The test runs the schedule cycle itself; nothing goes to Celery or the agents."""
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)
    monkeypatch.setattr(dispatch, "send", lambda messages: None)


@pytest.fixture
def borrowing(alice, django_capture_on_commit_callbacks):
    """The cluster above, placed by the real schedule cycle, its pods then reported Running."""
    def cycle():
        with django_capture_on_commit_callbacks(execute=True):
            cycle_tasks.process_cycle.run()

    submit(alice, "nlp-team", "ml-research", pods=2, instance_type=V100)
    submit(alice, "cv-team", "vision-lab", pods=1, resources=QUARTER)
    cycle()
    submit(alice, "nlp-team", "ml-research", pods=3, resources=QUARTER, oversold="ForceQuotaOverSold")
    cycle()
    Pod.objects.holding().update(status=PodStatus.RUNNING)
    borrower = Pod.objects.filter(kind=PodKind.IDLE).order_by("pk").first()
    Pod.objects.filter(pk=borrower.pk).update(status=PodStatus.UNKNOWN)


def submit(user, quota, workspace, *, pods, instance_type="", resources=None, oversold="ForbiddenQuotaOverSold"):
    create_job(user, JobRequest(
        display_name=f"{quota}-{oversold}", user_command="python train.py",
        workspace_id=Workspace.objects.get(name=workspace).pk, quota_id=Quota.objects.get(name=quota).quota_id,
        oversold_type=oversold,
        roles=[RoleRequest(pod_count=pods, instance_type=instance_type, resources=resources, image="pytorch:2")],
    ))


def test_every_face_reports_the_same_guaranteed_use_lending_and_borrowing(borrowing, client, alice, alice_studio):
    client.force_login(alice)
    usage = {Quota.objects.get(pk=pk).name: u for pk, u in usage_by_quota().items()}
    nlp, cv, platform = usage["nlp-team"], usage["cv-team"], usage["ml-platform"]
    assert (nlp.guaranteed_used, nlp.lent, nlp.borrowed) == (gpus(16, 128, 512), Resources(), gpus(12, 48, 192))
    assert (cv.guaranteed_used, cv.lent, cv.borrowed) == (gpus(4, 16, 64), gpus(12, 48, 192), Resources())
    assert nlp.guaranteed_used.fits(nlp.capacity)  # a quota never uses more than its guarantee
    # The parent's guarantee is its sub-quotas' nodes, so its guaranteed use is theirs too.
    assert (platform.guaranteed_used, platform.self_used) == (gpus(20, 144, 576), Resources())
    assert platform.lent == platform.borrowed == Resources()

    assert scheduler_usage() == {name: (u.capacity, u.guaranteed_used) for name, u in usage.items()}
    assert console_rows(client) == {name: console_figures(u) for name, u in usage.items()}

    listed, raw = sdk_quota_details(alice_studio, lambda c: c.list_quotas(studio.ListQuotasRequest()))
    assert {q.quota_name: sdk_figures(q.quota_details) for q in listed.quotas} == {
        name: expected_sdk_figures(u) for name, u in usage.items()}
    assert {q["QuotaName"]: extra_figures(q["QuotaDetails"]) for q in raw["Quotas"]} == {
        name: expected_extra_figures(u) for name, u in usage.items()}

    for name in ("nlp-team", "cv-team", "ml-platform"):
        quota_id = Quota.objects.get(name=name).quota_id
        got, raw = sdk_quota_details(alice_studio, lambda c, q=quota_id: c.get_quota(q, studio.GetQuotaRequest()))
        assert sdk_figures(got.quota_details) == expected_sdk_figures(usage[name])
        assert extra_figures(raw["QuotaDetails"]) == expected_extra_figures(usage[name])

    # What ListNodes shows on cv-team's nodes is its own guaranteed use plus what it lends.
    cv_id = Quota.objects.get(name="cv-team").quota_id
    nodes = alice_studio.list_nodes(studio.ListNodesRequest(quota_id=cv_id)).body.nodes
    assert sum(int(n.request_gpu) for n in nodes) == (cv.guaranteed_used + cv.lent).gpu == 16


def test_a_member_reads_on_the_quotas_page_what_list_quotas_tells_him(borrowing, client, bob, bob_studio):
    """bob, a plain member, reads the Quotas page (read-only) with the figures ListQuotas gives him."""
    client.force_login(bob)
    usage = {Quota.objects.get(pk=pk).name: u for pk, u in usage_by_quota().items()}
    listed, _ = sdk_quota_details(bob_studio, lambda c: c.list_quotas(studio.ListQuotasRequest()))
    theirs = {q.quota_name for q in listed.quotas}
    assert {"nlp-team", "cv-team"} <= theirs
    assert console_rows(client) == {name: console_figures(usage[name]) for name in theirs}
    assert {q.quota_name: sdk_figures(q.quota_details) for q in listed.quotas} == {
        name: expected_sdk_figures(usage[name]) for name in theirs}
    nlp = console_figures(usage["nlp-team"])
    assert nlp[2:] == (0, 12)  # it lends nothing and borrows 12 GPUs: the bar shows them apart
    # 16 used of 16 guaranteed, then 12 borrowed: the bar spans 28 GPUs.
    assert '<span class="used" data-width="57"></span><span class="lent" data-width="0"></span>' \
           '<span class="free" data-width="0"></span><span class="borrowed" data-width="43"></span>' \
           in client.get("/quotas/").content.decode()


def gpus(gpu: int, cores: int, gib: int) -> Resources:
    return Resources(gpu, cores * 1000, gib * GiB)


def scheduler_usage() -> dict:
    """What the scheduler counts against each quota's guarantee, from the cycle's own snapshot."""
    cluster = snapshot.cluster(jobs=())
    tree = QuotaTree(cluster.quotas, cluster.nodes)
    tree.count_running(cluster.pods)
    return {name: (tree.guarantee[name], tree.usage[name]) for name in tree.quotas}


# --- the console's Quotas page ----------------------------------------------------------------------

class _QuotaRows(HTMLParser):
    """The Quotas table's rows: the quota name (its <strong>) and its numeric cells' first figure."""

    def __init__(self):
        super().__init__()
        self.rows, self._row, self._cell, self._in = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "tr":
            self._row = {"name": None, "nums": []}
        elif self._row is not None and tag == "td" and "num" in classes:
            self._cell = ""
        elif self._row is not None and tag == "strong":
            self._in = "name"

    def handle_data(self, data):
        if self._in == "name":
            self._row["name"] = data.strip()
            self._in = None
        elif self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self._row["nums"].append(int(self._cell.split()[0]))
            self._cell = None
        elif tag == "tr" and self._row and self._row["name"]:
            self.rows[self._row["name"]] = tuple(self._row["nums"])
            self._row = None


def console_rows(client) -> dict:
    response = client.get("/quotas/")
    assert response.status_code == 200
    parser = _QuotaRows()
    parser.feed(response.content.decode())
    return parser.rows


def console_figures(u) -> tuple:
    """Guaranteed, Used, Lent, Borrowed as the page shows them: GPUs, or vCPUs for a CPU-only quota."""
    unit = (lambda r: r.gpu) if u.capacity.gpu else (lambda r: r.cpu_m // 1000)
    return tuple(unit(r) for r in (u.capacity, u.guaranteed_used, u.lent, u.borrowed))


# --- ListQuotas and GetQuota through the official SDK -----------------------------------------------

def sdk_quota_details(client, call):
    """The SDK's parsed reply and, beside it, the raw body the server sent (for keys the SDK has no field for)."""
    raw, call_api = [], client.call_api
    client.call_api = lambda *args: raw.append(call_api(*args)) or raw[-1]
    try:
        return call(client).body, raw[-1]["body"]
    finally:
        del client.call_api


def amount(r: Resources) -> tuple:
    return (str(r.gpu), f"{r.cpu_m // 1000}" if r.cpu_m % 1000 == 0 else f"{r.cpu_m}m",
            f"{r.mem_mib // 1024}Gi" if r.mem_mib % 1024 == 0 else f"{r.mem_mib}Mi")


def sdk_amount(a) -> tuple:
    return (a.gpu, a.cpu, a.memory)


def sdk_figures(details) -> dict:
    return {
        "Min": sdk_amount(details.actual_min_quota),
        "Used": sdk_amount(details.used_quota),
        "Allocated": sdk_amount(details.allocated_quota) if details.allocated_quota else None,
        "Self": sdk_amount(details.self_allocated_quota),
        "Descendants": sdk_amount(details.descendants_allocated_quota),
    }


def expected_sdk_figures(u) -> dict:
    used = amount(u.guaranteed_used)
    return {"Min": amount(u.capacity), "Used": used, "Allocated": used, "Self": amount(u.self_used),
            "Descendants": amount(u.guaranteed_used - u.self_used)}


def extra_figures(details: dict) -> dict:
    return {key: (details[key]["GPU"], details[key]["CPU"], details[key]["Memory"]) if key in details else None
            for key in ("LentQuota", "BorrowedQuota")}


def expected_extra_figures(u) -> dict:
    return {"LentQuota": amount(u.lent), "BorrowedQuota": amount(u.borrowed)}
