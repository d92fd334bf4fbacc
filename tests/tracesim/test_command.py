"""manage.py replay_trace on a 50-job slice of the Philly trace writes its JSON and HTML, the
jobs and the breakdown as CSV, and prints the breakdown."""

import csv
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from .conftest import job

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
PHILLY_JOBS, PHILLY_NODES = DATA / "philly_jobs.csv", DATA / "philly_vc_nodes.csv"


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(not PHILLY_JOBS.exists(), reason="the shared Philly trace is not here")
def test_the_command_writes_the_json_summary_and_the_html_report(tmp_path, capsys):
    out = tmp_path / "replay"
    call_command("replay_trace", jobs=str(PHILLY_JOBS), nodes=str(PHILLY_NODES), policy="all",
                 ckpt_minutes=30, out=str(out), limit=50, no_progress=True)
    summary = json.loads((out / "summary.json").read_text())
    assert [p["policy"] for p in summary["policies"]] == ["strict", "borrow", "borrow-ckpt", "elastic"]
    strict = summary["policies"][0]
    assert strict["jobs_replayed"] + strict["jobs_skipped"] == 50
    assert set(strict["queueing_delay_s"]) == {"mean", "median", "p95", "max"}
    page = (out / "report.html").read_text()
    assert "Queueing delay CDF" in page and "GPU utilization over time" in page
    assert "Preemptions and GPU-hours lost" in page and "3,760.6" in page
    assert "<script src=" not in page and "plotly.js v" in page  # plotly.js inlined, no CDN
    printed = capsys.readouterr().out
    assert "Philly's own scheduler (AcmeTrace summary): jobs 112,956" in printed
    assert any(line.startswith("GPUs 1 ") for line in printed.splitlines())
    jobs = read_csv(out / "jobs.csv")
    assert len(jobs) == sum(p["jobs_replayed"] for p in summary["policies"])
    assert {row["quota"] for row in jobs} <= {row["vc"] for row in read_csv(PHILLY_NODES)}
    breakdown = read_csv(out / "breakdown.csv")
    assert {row["by"] for row in breakdown} == {"total", "size", "quota", "mode"}


def test_a_trace_on_other_virtual_clusters_gets_no_philly_reference_row(
        write_trace, tmp_path, capsys):
    jobs, nodes = write_trace([job(0, 10, 1, "a")], {"a": 1})
    call_command("replay_trace", jobs=jobs, nodes=nodes, policy="strict", out=str(tmp_path),
                 no_progress=True)
    assert "Philly" not in capsys.readouterr().out
    assert "Philly" not in (tmp_path / "report.html").read_text()


def test_backfill_on_replays_a_full_node_job_behind_its_reservation_and_says_so(
        write_trace, tmp_path, capsys):
    rows = [job(0, 100, 1, "a"), job(1, 100, 8, "a")] + [job(20 * k, 100, 1, "a") for k in range(1, 60)]
    jobs, nodes = write_trace(rows, {"a": 1})
    starts = {}
    for backfill in ("off", "on"):
        out = tmp_path / backfill
        call_command("replay_trace", jobs=jobs, nodes=nodes, policy="strict", out=str(out),
                     backfill=backfill, no_progress=True)
        starts[backfill] = next(int(r["first_start_s"]) for r in read_csv(out / "jobs.csv") if r["gpus"] == "8")
    printed = capsys.readouterr().out
    assert "backfill off: smaller jobs pass a head job that does not fit" in printed
    assert "backfill on: the head job of each VC's queue that does not fit reserves" in printed
    assert starts["on"] <= 200 < starts["off"]


def test_a_nodes_file_naming_a_virtual_cluster_twice_is_refused_with_its_lines(
        write_trace, tmp_path):
    jobs, _ = write_trace([job(0, 10, 1, "a")], {"a": 1})
    nodes = tmp_path / "twice.csv"
    nodes.write_text("vc,node num\na,1\na,3\n")
    with pytest.raises(CommandError, match="'a' is named on lines 2 and 3"):
        call_command("replay_trace", jobs=jobs, nodes=str(nodes), out=str(tmp_path),
                     no_progress=True)


def test_the_command_says_which_file_it_cannot_read(tmp_path):
    with pytest.raises(CommandError, match="Cannot read the trace"):
        call_command("replay_trace", jobs=str(tmp_path / "missing.csv"),
                     nodes=str(tmp_path / "missing_vcs.csv"), out=str(tmp_path), no_progress=True)
