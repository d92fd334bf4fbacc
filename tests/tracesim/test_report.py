"""What a replay reports: queueing by size, quota and mode, each policy's treatment of the
trace's own modes, one row a job in jobs.csv, the reference row, the Alibaba trace's format."""

import csv
from pathlib import Path

import pytest

from tracesim import read_trace, replay
from tracesim.metrics import summary
from tracesim.outputs import write_outputs
from tracesim.report import PHILLY_VCS, policy_notes, reference_for, text_report

from .conftest import job

# Quota a (one node) is full from 0 to 100 s; b (one node) is idle until 30 s.
ROWS = [job(0, 100, 8, "a"),
        job(10, 50, 2, "a"),  # waits 90 s under strict, borrows b's node at once otherwise
        job(20, 10, 1, "b"),
        job(30, 40, 16, "a", oversold_type="ForceQuotaOverSold")]  # a gang of both nodes


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def replay_all(write_trace, rows=ROWS, vcs=None, policies=("strict", "borrow")):
    trace = read_trace(*write_trace(rows, vcs or {"a": 1, "b": 1}))
    results = [replay(trace, p) for p in policies]
    return results, [summary(r) for r in results]


def group(s: dict, by: str, name: str) -> dict:
    return next(r for r in s["breakdown"] if (r["by"], r["group"]) == (by, name))


def test_queueing_is_broken_down_by_job_size_quota_and_mode_beside_the_total(write_trace):
    _, (strict, borrow) = replay_all(write_trace, ROWS, {"a": 2, "b": 1})
    # Strict (quota a: 2 nodes): the 16-GPU job waits for the 8-GPU one (30 -> 100 s), the
    # others start at once; under borrow the same, the 16-GPU job using only idle capacity.
    assert group(strict, "total", "all jobs")["queueing_delay_s"]["mean"] == 70 / 4
    assert [(r["group"], r["jobs"]) for r in strict["breakdown"] if r["by"] == "size"] == [
        ("1", 1), ("2-4", 1), ("8", 1), ("> 8", 1)]
    assert group(strict, "size", "> 8")["queueing_delay_s"]["max"] == 70
    assert group(strict, "size", "1")["queueing_delay_s"]["max"] == 0
    assert group(strict, "quota", "a")["jobs"] == 3 and group(strict, "quota", "b")["jobs"] == 1
    assert group(strict, "quota", "a")["queueing_delay_s"]["mean"] == round(70 / 3, 1)
    assert [r["group"] for r in strict["breakdown"] if r["by"] == "mode"] == [
        "ForbiddenQuotaOverSold"]
    assert {r["group"]: r["jobs"] for r in borrow["breakdown"] if r["by"] == "mode"} == {
        "AcceptQuotaOverSold": 3, "ForceQuotaOverSold": 1}


def test_the_printed_report_sets_the_policies_side_by_side_per_group(write_trace):
    results, summaries = replay_all(write_trace)
    lines = text_report(results, summaries)
    row = next(line for line in lines if line.startswith("GPUs 2-4 "))
    assert [cell.split() for cell in row.split("|")[1:]] == [["1", "90", "90", "90"],
                                                             ["1", "0", "0", "0"]]
    assert any(line.startswith("quota b ") for line in lines)
    force = next(line for line in lines if line.startswith("mode ForceQuotaOverSold"))
    assert force.split("|")[1].split() == ["-"]  # strict replays no job Force


def test_each_policy_says_what_it_does_with_the_modes_the_trace_sets(write_trace):
    results, summaries = replay_all(write_trace, ROWS, {"a": 2, "b": 1})
    strict, borrow = policy_notes(results, summaries)
    assert strict == ("strict: every job ForbiddenQuotaOverSold (its quota's guarantee only); "
                      "the trace's own mode of 1 job is not used; "
                      "replayed as ForbiddenQuotaOverSold 4")
    assert borrow.startswith("borrow: the trace's own mode kept for 1 job, "
                             "AcceptQuotaOverSold for the others; replayed as "
                             "AcceptQuotaOverSold 3 · ForceQuotaOverSold 1")


def test_the_report_says_why_strict_and_borrow_replayed_alike(write_trace):
    rows = [dict(r, oversold_type="ForbiddenQuotaOverSold") for r in ROWS[:3]]
    results, summaries = replay_all(write_trace, rows)
    assert policy_notes(results, summaries)[1].startswith(
        "borrow: the trace's own mode kept for every job; ")
    assert policy_notes(results, summaries)[-1] == (
        "borrow replayed every job as strict did — every job has the same mode under both")
    results, summaries = replay_all(write_trace, ROWS[:1] + ROWS[2:3])  # no job must wait
    assert policy_notes(results, summaries)[-1].endswith("(none ran Not in Quota)")
    results, summaries = replay_all(write_trace)  # borrowing changed the times: no such line
    assert len(policy_notes(results, summaries)) == 2


def test_the_out_folder_gets_one_jobs_csv_row_a_job_and_policy_and_the_breakdown(
        write_trace, tmp_path):
    results, summaries = replay_all(write_trace)
    paths = write_outputs(str(tmp_path / "out"), results, summaries, sources={},
                          title="t", reference=None)
    jobs = read_csv(paths[2])
    assert len(jobs) == 3 + 4  # strict skips the 16-GPU job: it is larger than quota a
    assert jobs[1] == {"policy": "strict", "job_id": "j000003", "submit_s": "10",
                       "first_start_s": "100", "end_s": "150", "gpus": "2", "quota": "a",
                       "oversold_type": "ForbiddenQuotaOverSold", "priority": "1",
                       "preemptions": "0", "gpu_seconds_lost": "0"}
    force = jobs[6]
    assert (force["policy"], force["oversold_type"], force["first_start_s"]) == (
        "borrow", "ForceQuotaOverSold", "100")
    breakdown = read_csv(paths[3])
    size = next(r for r in breakdown if (r["policy"], r["by"], r["group"]) ==
                ("strict", "size", "2-4"))
    assert (size["jobs"], size["queueing_mean_s"], size["queueing_p95_s"]) == ("1", "90.0",
                                                                                "90.0")
    page = Path(paths[1]).read_text()
    assert "Queueing by job size, quota and Idle Resources mode" in page
    assert "Philly's own scheduler" not in page


def test_a_job_that_never_started_has_empty_start_and_end_cells(write_trace, tmp_path):
    rows = [job(0, 100, 8, "a", spot_discount="0.1")]  # a bid below the spot price
    trace = read_trace(*write_trace(rows, {"a": 1}))
    results = [replay(trace, "strict", public_nodes=2)]
    paths = write_outputs(str(tmp_path), results, [summary(r) for r in results], sources={},
                          title="t", reference=None)
    (row,) = read_csv(paths[2])
    assert (row["first_start_s"], row["end_s"], row["quota"]) == ("", "", "public pool (spot)")


def test_philly_s_own_scheduler_is_the_reference_only_for_philly_s_virtual_clusters():
    assert reference_for(PHILLY_VCS)["mean"] == 3760.604
    assert reference_for(["a", "b"]) is None
    assert reference_for(list(PHILLY_VCS)[:5]) is None


def write_alibaba(tmp_path) -> tuple[str, str]:
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,12000,16384,1,460,,LS,Running,100,1100,100\n"
        "p1,6000,12288,0,0,,LS,Running,150,900,150\n"
        "p2,6000,12288,8,1000,,BE,Failed,200,500,260\n"
        "p3,6000,12288,2,1000,,Burstable,Succeeded,300,400,300\n"
        "p4,6000,12288,1,1000,,BE,Pending,400,450,\n")
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\n"
                     "n1,64000,262144,4,T4\nn2,64000,262144,2,T4\nn3,64000,262144,2,T4\n")
    return str(pods), str(nodes)


def test_alibaba_gpu_pods_are_jobs_whose_qos_sets_their_mode(tmp_path):
    trace = read_trace(*write_alibaba(tmp_path))
    assert [(j.submit, j.duration, j.gpus, j.vc, j.oversold_type) for j in trace.jobs] == [
        (0, 1000, 1, "openb", "ForbiddenQuotaOverSold"),
        (100, 240, 8, "openb", "ForceQuotaOverSold"),
        (200, 100, 2, "openb", "AcceptQuotaOverSold")]
    assert [(line, why.split(":")[0]) for line, why in trace.invalid] == [
        (3, "num_gpu is 0"), (6, "never scheduled in the trace (Pending)")]
    assert [(vc.name, vc.nodes, vc.gpus_per_node) for vc in trace.vcs] == [("openb", 2, 8)]


def write_qos_vcs(tmp_path, rows: str) -> str:
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,node num,qos\n" + rows)
    return str(vcs)


def test_a_qos_column_puts_alibaba_pods_in_the_quota_that_takes_their_qos(tmp_path):
    pods, _ = write_alibaba(tmp_path)
    trace = read_trace(pods, write_qos_vcs(tmp_path, "ls,1,LS Burstable\nbe,0,BE\n"))
    assert [(j.gpus, j.vc, j.oversold_type) for j in trace.jobs] == [
        (1, "ls", "ForbiddenQuotaOverSold"), (8, "be", "ForceQuotaOverSold"), (2, "ls", "AcceptQuotaOverSold")]
    assert [(vc.name, vc.nodes, vc.qos) for vc in trace.vcs] == [("ls", 1, ("LS", "Burstable")), ("be", 0, ("BE",))]
    # The best-effort quota owns no node: its Only Idle jobs run on the latency-sensitive quota's idle GPUs.
    s = summary(replay(trace, "borrow"))
    assert (s["jobs_replayed"], s["jobs_unfinished"]) == (3, 0)


def test_a_pod_whose_qos_no_virtual_cluster_takes_is_skipped_with_the_reason(tmp_path):
    pods, _ = write_alibaba(tmp_path)
    trace = read_trace(pods, write_qos_vcs(tmp_path, "ls,1,LS\n"))
    assert [j.vc for j in trace.jobs] == ["ls"]
    assert [why for _, why in trace.invalid if "qos" in why] == [
        "qos BE is taken by no virtual cluster (their qos column names LS)",
        "qos Burstable is taken by no virtual cluster (their qos column names LS)"]


@pytest.mark.parametrize("rows, why", [
    ("ls,1,LS\nbe,0,LS BE\n", "qos LS is taken on lines 2 and 3"),
    ("ls,1,LS Spot\n", "qos 'Spot' is not one of LS, Guaranteed, Burstable, BE"),
])
def test_a_qos_column_that_names_a_class_twice_or_an_unknown_one_is_refused(tmp_path, rows, why):
    pods, _ = write_alibaba(tmp_path)
    with pytest.raises(ValueError, match=why):
        read_trace(pods, write_qos_vcs(tmp_path, rows))


def test_a_qos_column_with_a_jobs_csv_is_refused_rather_than_ignored(write_trace, tmp_path):
    jobs, _ = write_trace(ROWS, {"a": 1})
    with pytest.raises(ValueError, match="the qos column places the pods of Alibaba's GPU trace"):
        read_trace(jobs, write_qos_vcs(tmp_path, "a,1,LS\n"))


def test_the_report_says_how_much_longer_large_jobs_wait_than_1_gpu_jobs_of_their_quota(write_trace):
    rows = [job(0, 100, 8, "a"),  # holds a's node
            job(10, 5, 1, "a"),  # waits 90 s
            job(20, 5, 8, "a"),  # waits 85 s (behind the 1-GPU job)
            job(30, 5, 16, "a", oversold_type="ForceQuotaOverSold"),  # Only Idle: not counted
            job(0, 5, 1, "b"), job(0, 5, 8, "b")]  # b: 1 GPU and 8 GPUs of one node
    results, summaries = replay_all(write_trace, rows, policies=("strict",))
    waits = summaries[0]["large_job_wait"]
    a = next(r for r in waits if r["quota"] == "a")
    assert (a["jobs_1_gpu"], a["jobs_large"], a["mean_1_gpu_s"]) == (1, 2, 90.0)
    assert a["mean_large_s"] == (0 + 85) / 2 and a["ratio"] == round(42.5 / 90, 2)
    # b's 1-GPU job waited 0 s (counted as 1 s), its 8-GPU job 5 s: the worst quota comes first.
    assert [(r["quota"], r["ratio"]) for r in waits] == [("b", 5.0), ("a", 0.47)]
    line = next(l for l in text_report(results, summaries) if "large jobs" in l)
    assert line.startswith("strict       large jobs wait") and "target 3x" in line
