"""The replay engine on tiny traces: exact times, borrowing, reclaim, checkpoints, gangs."""

import random

import pytest

from tracesim import read_trace, replay
from tracesim.cluster import gang
from tracesim.metrics import summary
from tracesim.engine import Replay
from tracesim.trace import Trace, VirtualCluster, read_vcs

from .conftest import job


def runs(result) -> list:
    """Replayed jobs in trace order (row 0 first)."""
    return sorted(result.jobs, key=lambda r: r.job.job_id)


def replay_rows(write_trace, rows, vcs, policy="strict", **kw):
    return runs(replay(read_trace(*write_trace(rows, vcs)), policy, **kw))


def test_a_job_waits_until_capacity_frees_and_its_queueing_delay_is_exact(write_trace):
    first, second = replay_rows(write_trace, [job(0, 100, 8, "a"), job(10, 50, 8, "a")],
                                {"a": 1})
    assert (first.first_start, first.end) == (0, 100)
    assert (second.first_start, second.end) == (100, 150)
    assert second.first_start - second.job.submit == 90


def test_a_small_job_backfills_past_a_blocked_larger_one(write_trace):
    rows = [job(0, 100, 6, "a"), job(1, 10, 8, "a"), job(2, 10, 2, "a")]
    _, big, small = replay_rows(write_trace, rows, {"a": 1})
    assert small.first_start == 2 and big.first_start == 100


def test_with_backfill_a_stream_of_small_jobs_no_longer_starves_a_full_node_job(write_trace):
    # One 8-GPU node: 1-GPU jobs of 100 s arrive every 20 s, so a GPU frees every 20 s or so
    # and, without a reservation, the next small job always takes it.
    rows = [job(0, 100, 1, "a")] + [job(1, 100, 8, "a")] + [
        job(20 * k, 100, 1, "a") for k in range(1, 200)]
    without = replay_rows(write_trace, rows, {"a": 1})
    with_backfill = replay_rows(write_trace, rows, {"a": 1}, backfill=True)
    big_without = next(r for r in without if r.job.gpus == 8)
    big_with = next(r for r in with_backfill if r.job.gpus == 8)
    assert big_without.first_start > 3_000
    assert big_with.first_start <= 200


def test_a_job_that_outlives_its_quotas_typical_run_does_not_let_the_reservation_slip(write_trace):
    # One 8-GPU node. Ten 10-s jobs make the quota's typical run 10 s; four 1,000-s jobs then hold
    # half the node, and the 8-GPU head reserves it. The 1-GPU jobs behind it run 2,000 s each:
    # backfilled on the held GPUs for the 10 s their quota typically runs, each would hold its
    # GPU long past the reservation, and the next would take the GPU the last one freed.
    rows = ([job(k, 10, 1, "a") for k in range(10)] + [job(20, 1_000, 1, "a") for _ in range(4)]
            + [job(30, 100, 8, "a")] + [job(40 + 100 * k, 2_000, 1, "a") for k in range(40)])
    big = next(r for r in replay_rows(write_trace, rows, {"a": 1}, backfill=True) if r.job.gpus == 8)
    assert big.first_start == 1_020  # when the four 1,000-s jobs end


def test_borrowing_lets_a_job_start_earlier_than_under_strict_quotas(write_trace):
    rows = [job(0, 100, 8, "a"), job(10, 50, 8, "a")]
    strict = replay_rows(write_trace, rows, {"a": 1, "b": 1}, "strict")
    borrow = replay_rows(write_trace, rows, {"a": 1, "b": 1}, "borrow")
    assert strict[1].first_start == 100
    assert borrow[1].first_start == 10 and borrow[1].end == 60
    assert borrow[1].borrowed_runs == 1 and strict[1].borrowed_runs == 0


RECLAIM = [job(0, 36_000, 8, "a"),  # fills quota a for 10 h
           job(1, 36_000, 8, "a"),  # borrows the node of quota b
           job(7_801, 100, 8, "b")]  # b wants its node back 2 h 10 min later


def test_a_reclaim_preempts_the_borrower_and_the_lender_starts_at_once(write_trace):
    _, borrower, lender = replay_rows(write_trace, RECLAIM, {"a": 1, "b": 1}, "borrow")
    assert lender.first_start == 7_801
    assert borrower.preemptions == 1
    # Without checkpoints all 7,800 s of work are lost and the job starts over.
    assert borrower.lost_gpu_s == 7_800 * 8
    assert borrower.end == 7_901 + 36_000


def test_with_checkpoints_the_lost_work_is_at_most_one_checkpoint_interval(write_trace):
    _, borrower, lender = replay_rows(write_trace, RECLAIM, {"a": 1, "b": 1}, "borrow-ckpt",
                                      checkpoint_minutes=30)
    assert lender.first_start == 7_801 and borrower.preemptions == 1
    assert borrower.lost_gpu_s == (7_800 - 7_200) * 8  # checkpoints at 30, 60, 90, 120 min
    assert borrower.lost_gpu_s <= 30 * 60 * 8
    assert borrower.end == 7_901 + 36_000 - 7_200  # resumes from the 2-hour checkpoint


SHRINK = [job(0, 36_000, 8, "a"),  # fills quota a for 10 h
          job(1, 36_000, 8, "a"),  # borrows the node of quota b
          job(7_801, 3_600, 4, "b")]  # b wants half its node back for an hour


def test_an_elastic_borrower_is_shrunk_instead_of_stopped_and_grows_back(write_trace):
    _, borrower, lender = replay_rows(write_trace, SHRINK, {"a": 1, "b": 1}, "elastic",
                                      checkpoint_minutes=30)
    assert lender.first_start == 7_801
    assert (borrower.preemptions, borrower.shrinks, borrower.growths) == (0, 1, 1)
    # 7,200 s at 8 GPUs kept (600 lost), then an hour at 4 GPUs, then the rest at 8 again.
    assert borrower.lost_gpu_s == 600 * 8
    assert borrower.end == 11_401 + (36_000 * 8 - 7_200 * 8 - 3_600 * 4) // 8


def test_the_same_borrower_as_a_gang_waits_out_the_lender_and_ends_later(write_trace):
    _, borrower, _ = replay_rows(write_trace, SHRINK, {"a": 1, "b": 1}, "borrow-ckpt",
                                 checkpoint_minutes=30)
    assert borrower.preemptions == 1
    assert borrower.end == 11_401 + 36_000 - 7_200  # 1,800 s after the elastic one


def test_an_elastic_job_starts_with_the_gpus_that_are_free_and_grows_when_more_free_up(write_trace):
    _, second = replay_rows(write_trace, [job(0, 1_000, 4, "a"), job(10, 1_000, 8, "a")],
                                {"a": 1}, "elastic", checkpoint_minutes=1)
    assert (second.first_start, second.growths, second.shrinks) == (10, 1, 0)
    # 960 s at 4 GPUs kept (checkpoints every 60 s, 30 s lost), the rest at 8 from t=1,000.
    assert second.lost_gpu_s == 30 * 4
    assert second.end == 1_000 + (1_000 * 8 - 960 * 4) // 8


def test_the_summary_reports_delays_utilization_and_lost_gpu_hours(write_trace):
    result = replay(read_trace(*write_trace(RECLAIM, {"a": 1, "b": 1})), "borrow-ckpt",
                    checkpoint_minutes=30)
    s = summary(result)
    assert s["queueing_delay_s"]["mean"] == 0 and s["jobs_started_at_once"] == 3
    assert s["preemptions"] == 1 and s["jobs_run_not_in_quota"] == 1
    assert s["gpu_hours_lost"] == round(600 * 8 / 3600, 1)
    assert s["makespan_s"] == 7_901 + 36_000 - 7_200
    busy = 36_000 * 8 + 7_800 * 8 + 100 * 8 + (s["makespan_s"] - 7_901) * 8
    assert s["gpu_utilization"] == round(busy / (16 * s["makespan_s"]), 4)


def test_strict_quotas_never_preempt(write_trace):
    result = replay_rows(write_trace, RECLAIM, {"a": 1, "b": 1}, "strict")
    assert [r.preemptions for r in result] == [0, 0, 0]
    assert result[1].first_start == 36_000


def test_a_job_of_more_than_8_gpus_is_a_gang_of_full_nodes_placed_together(write_trace):
    assert [p.resources.gpu for p in gang(20, 8)] == [8, 8, 4]
    assert [p.resources.gpu for p in gang(16, 8)] == [8, 8]
    small, big = replay_rows(write_trace, [job(0, 100, 5, "a"), job(5, 10, 20, "a")],
                             {"a": 3})
    # 19 GPUs free, but the pod of 4 fits no node beside two empty ones until the 5 are done.
    assert big.first_start == 100 and big.end == 110


def test_optional_columns_override_the_policy_per_job(write_trace):
    rows = [job(0, 100, 8, "a"),
            job(10, 50, 8, "a", oversold_type="ForbiddenQuotaOverSold"),
            job(20, 50, 8, "c", oversold_type="AcceptQuotaOverSold"),
            job(0, 100, 8, "c")]
    _, forbidden, accept, _ = replay_rows(write_trace, rows, {"a": 1, "b": 1, "c": 1},
                                              "borrow")
    assert forbidden.first_start == 100  # would have borrowed b's node under the policy
    assert accept.first_start == 20 and accept.borrowed_runs == 1  # borrows b's node


def test_strict_quotas_hold_every_job_to_its_guarantee_whatever_mode_the_trace_sets(
        write_trace):
    rows = [job(0, 100, 8, "a", oversold_type="AcceptQuotaOverSold"),
            job(10, 50, 8, "a", oversold_type="AcceptQuotaOverSold"),
            job(20, 50, 8, "a", oversold_type="ForceQuotaOverSold")]
    strict = replay_rows(write_trace, rows, {"a": 1, "b": 1}, "strict")
    borrow = replay_rows(write_trace, rows, {"a": 1, "b": 1}, "borrow")
    assert [r.mode for r in strict] == ["ForbiddenQuotaOverSold"] * 3
    assert [r.first_start for r in strict] == [0, 100, 150]
    assert [r.mode for r in borrow] == ["AcceptQuotaOverSold"] * 2 + ["ForceQuotaOverSold"]
    assert [r.first_start for r in borrow] == [0, 10, 60]  # b's node, lent one job at a time


def test_a_higher_priority_column_goes_first_in_its_queue(write_trace):
    rows = [job(0, 100, 8, "a"), job(1, 10, 8, "a"), job(2, 10, 8, "a", priority=9)]
    _, low, high = replay_rows(write_trace, rows, {"a": 1})
    assert high.first_start == 100 and low.first_start == 110


def test_spot_jobs_need_a_public_pool_or_are_skipped(write_trace):
    rows = [job(0, 100, 8, "a", spot_discount="0.5"), job(0, 100, 4, "a")]
    trace = read_trace(*write_trace(rows, {"a": 1}))
    without = replay(trace, "strict")
    assert without.skipped == {"spot job without a public pool (--public-nodes)": 1}
    # Two public nodes: one of them is the pay-as-you-go reserve, closed to spot.
    spot = next(r for r in replay(trace, "strict", public_nodes=2).jobs if r.mode == "spot")
    assert spot.first_start == 0 and spot.kind is None and spot.end == 100


def test_a_bid_below_the_spot_price_never_runs(write_trace):
    rows = [job(0, 100, 8, "a", spot_discount="0.1")]
    result = replay(read_trace(*write_trace(rows, {"a": 1})), "strict", public_nodes=2)
    assert result.jobs[0].first_start is None


def test_jobs_of_an_unknown_virtual_cluster_are_skipped_and_counted(write_trace):
    rows = [job(0, 10, 1, "a"), job(1, 10, 1, "zz"), job(2, 10, 1, "zz")]
    result = replay(read_trace(*write_trace(rows, {"a": 1})), "borrow")
    assert len(result.jobs) == 1
    assert result.skipped == {"virtual cluster missing from the nodes file": 2}


def test_pruning_the_snapshot_changes_no_decision(write_trace):
    rng = random.Random(7)
    rows = [job(rng.randrange(20_000), rng.choice([30, 600, 3_000, 9_000]),
                rng.choice([1, 1, 1, 2, 4, 8, 12, 16]), rng.choice("abc")) for _ in range(250)]
    trace = read_trace(*write_trace(rows, {"a": 2, "b": 1, "c": 1}))
    for policy in ("strict", "borrow", "borrow-ckpt", "elastic"):
        fast, full = (replay(trace, policy, 10, prefilter=p)
                      for p in (True, False))
        # Under the elastic policy every queue's first job is planned at every event while it
        # waits (a waiting job holds elastic jobs back from growing).
        assert full.cycles > fast.cycles or policy == "elastic"
        seen = [(r.job.job_id, r.first_start, r.end, r.preemptions, r.lost_gpu_s, r.shrinks, r.growths)
                for r in sorted(fast.jobs, key=lambda r: r.job.job_id)]
        assert seen == [(r.job.job_id, r.first_start, r.end, r.preemptions, r.lost_gpu_s, r.shrinks, r.growths)
                        for r in sorted(full.jobs, key=lambda r: r.job.job_id)]
    assert sum(r.preemptions for r in fast.jobs) > 0  # the borrow policies did reclaim



def test_with_reservations_the_replay_plans_every_waiting_job():
    # Which job of a queue is its head, the first that waits In Quota, depends on what the
    # other queues' heads hold; a pruned snapshot gave a queue another head (and so other
    # decisions) than the whole one, so a replay with backfill is not pruned.
    trace = Trace([], [VirtualCluster("a", 1)])
    assert Replay(trace, "borrow", 10, backfill=True).prefilter is False
    assert Replay(trace, "borrow", 10).prefilter is True


@pytest.mark.parametrize("bad", [{"oversold_type": "Sometimes"}, {"priority": "12"}])
def test_a_bad_optional_column_value_is_reported_not_replayed(write_trace, bad):
    trace = read_trace(*write_trace([job(0, 10, 1, "a", **bad), job(1, 10, 1, "a")], {"a": 1}))
    assert len(trace.jobs) == 1 and trace.invalid[0][0] == 2


def test_a_nodes_file_that_names_a_virtual_cluster_twice_is_refused_with_both_lines(tmp_path):
    nodes = tmp_path / "vcs.csv"
    nodes.write_text("vc,node num\na,2\nb,1\na,4\n")
    with pytest.raises(ValueError, match="'a' is named on lines 2 and 4"):
        read_vcs(str(nodes))
