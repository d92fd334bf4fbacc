"""The stock of a public pool (SpotStockStatus, with the pay-as-you-go reserve) has one home, the
scheduler's rule in whole nodes (scheduler/spot.py): the scheduler, ListEcsSpecs, the scheduler's
market and the Spot Market page give the same answer."""

from decimal import Decimal

import pytest

from api.spot import spot_market
from console.pages.market_data import market_rows
from cycle import tasks as cycle_tasks
from jobs.models import Pod, PodKind, Source
from jobs.states import JobStatus, PodStatus
from spot.market_state import current_markets
from tests.spot.builders import A10, at, make_job, price_row, public_nodes, spec, submit_spot

V100 = "ecs.gn6v-c8g1.16xlarge"  # public pool: 2 nodes of 8 GPUs


@pytest.fixture(autouse=True)
def no_cycle_requests(monkeypatch):
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)


def busy(node, *, gpu=None, status=PodStatus.RUNNING) -> Pod:
    """A pay-as-you-go pod holding `gpu` GPUs of the node (all of them by default)."""
    job = make_job(source=Source.PUBLIC, status=JobStatus.RUNNING, instance_type=node.spec.instance_type)
    share = Decimal(gpu if gpu is not None else node.spec.gpu) / max(node.spec.gpu, 1)
    return Pod.objects.create(
        pod_id=f"{job.job_id}-worker-0", job=job, role="Worker", index=0, node=node, kind=PodKind.PAYG,
        gpu=gpu if gpu is not None else node.spec.gpu, cpu_m=int(node.spec.cpu_m * share),
        mem_mib=int(node.spec.memory_mib * share), status=status, started_at=at(9))


def stock_everywhere(instance_type: str, now) -> dict[str, str]:
    """SpotStockStatus of the type as ListEcsSpecs, the scheduler's market and the Spot Market page say it."""
    the_spec = spec(instance_type)
    [row] = [r for r in market_rows(now) if r["spec"].instance_type == instance_type]
    return {
        "ListEcsSpecs": spot_market([the_spec])[the_spec.pk]["stock"],
        "current_markets": current_markets(now)[instance_type].stock_status,
        "Spot Market page": row["stock_status"],
    }


@pytest.mark.parametrize("status", [PodStatus.RUNNING, PodStatus.PENDING, PodStatus.UNKNOWN])
def test_a_pool_whose_last_free_node_is_the_reserve_is_closed_to_spot_everywhere(demo_cluster, status):
    # The A10 pool has 6 nodes of 1 GPU; the reserve is 1 node. Five hold a pod (a pod of a lost
    # node, Unknown, holds its node too), so the last free node is kept for pay-as-you-go.
    for node in public_nodes(A10)[:5]:
        busy(node, status=status)
    price_row(at(10), "0.030000")
    job = submit_spot(A10, "0.5")  # 0.0735 per node-minute, well above the price

    assert set(stock_everywhere(A10, at(10)).values()) == {"ClosedWithStock"}
    cycle_tasks.process_cycle.run(now=at(10))
    job.refresh_from_db()
    assert job.status == JobStatus.BIDDING
    assert "1 of 6 nodes free, 1 kept for pay-as-you-go" in job.wait_reason


def test_a_node_held_in_part_is_no_stock_for_spot_anywhere(demo_cluster):
    # Two V100 nodes of 8 GPUs: one holds a 4-GPU pod, so 12 of 16 GPUs are free but one whole
    # node, and that one is the reserve. An instance starts only on a whole node.
    first, _ = public_nodes(V100)
    busy(first, gpu=4)
    price_row(at(10), "0.300000", V100)
    job = submit_spot(V100, "0.9")

    assert set(stock_everywhere(V100, at(10)).values()) == {"ClosedWithStock"}
    cycle_tasks.process_cycle.run(now=at(10))
    job.refresh_from_db()
    assert job.status == JobStatus.BIDDING
    assert "1 of 2 nodes free, 1 kept for pay-as-you-go" in job.wait_reason


def test_a_pool_with_a_node_for_sale_admits_spot_and_says_with_stock_everywhere(demo_cluster):
    for node in public_nodes(A10)[:4]:
        busy(node)
    price_row(at(10), "0.030000")
    job = submit_spot(A10, "0.5")

    assert set(stock_everywhere(A10, at(10)).values()) == {"WithStock"}
    cycle_tasks.process_cycle.run(now=at(10))
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING, job.wait_reason
