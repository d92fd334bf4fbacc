"""The files a replay writes into its output folder.

    summary.json   each policy's summary (tracesim.metrics.summary), breakdown included
    report.html    the charts and tables (tracesim.report)
    jobs.csv       one row a job and policy: when it was submitted, first started and ended,
                   its size, quota, mode and priority, how often it was preempted, work lost
    breakdown.csv  queueing by job size, quota and Idle Resources mode, beside the totals
"""

from __future__ import annotations

import csv
import json
import os

from .engine import SPOT, Result
from .metrics import PUBLIC_POOL
from .report import write_html

JOB_COLUMNS = ("policy", "job_id", "submit_s", "first_start_s", "end_s", "gpus", "quota",
               "oversold_type", "priority", "preemptions", "gpu_seconds_lost")
BREAKDOWN_COLUMNS = ("policy", "by", "group", "jobs", "started", "queueing_mean_s",
                     "queueing_median_s", "queueing_p95_s", "queueing_max_s", "preemptions",
                     "gpu_hours_lost")


def write_outputs(out_dir: str, results: list[Result], summaries: list[dict], *,
                  sources: dict, title: str, reference: dict | None) -> list[str]:
    """Write the four files into `out_dir` (made if missing); returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, name)
             for name in ("summary.json", "report.html", "jobs.csv", "breakdown.csv")]
    with open(paths[0], "w") as f:
        json.dump({**sources, "policies": summaries}, f, indent=2)
    write_html(results, summaries, paths[1], reference=reference, title=title)
    write_jobs_csv(results, paths[2])
    write_breakdown_csv(summaries, paths[3])
    return paths


def write_jobs_csv(results: list[Result], path: str) -> None:
    """Times are seconds since the trace's first submission; a job that never started or
    never ended has those cells empty."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(JOB_COLUMNS)
        for result in results:
            for r in sorted(result.jobs, key=lambda r: r.job.job_id):
                out.writerow((result.policy, r.job.job_id, r.job.submit, _blank(r.first_start),
                              _blank(r.end), r.job.gpus,
                              PUBLIC_POOL if r.mode == SPOT else r.job.vc, r.mode,
                              r.job.priority, r.preemptions, r.lost_gpu_s))


def write_breakdown_csv(summaries: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(BREAKDOWN_COLUMNS)
        for s in summaries:
            for row in s["breakdown"]:
                q = row["queueing_delay_s"]
                out.writerow((row["policy"], row["by"], row["group"], row["jobs"],
                              row["started"], q["mean"], q["median"], q["p95"], q["max"],
                              row["preemptions"], row["gpu_hours_lost"]))


def _blank(value: int | None):
    return "" if value is None else value
