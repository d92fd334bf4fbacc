"""manage.py replay_trace: replay a GPU job trace through scheduler.plan in virtual time.

A thin wrapper: it parses the arguments, calls tracesim, prints the report and writes
summary.json, report.html, jobs.csv and breakdown.csv into --out (tracesim/outputs.py). Example (the Philly trace's jobs and virtual clusters as CSV, in the
format tracesim/trace.py reads; all three policies):

    manage.py replay_trace --jobs philly_jobs.csv \\
        --nodes philly_vc_nodes.csv --policy all --ckpt-minutes 30 \\
        --out artifacts/replay
"""

import os

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from tracesim import POLICIES, read_trace, replay
from tracesim.metrics import summary
from tracesim.outputs import write_outputs
from tracesim.report import reference_for, text_report


class Command(BaseCommand):
    help = ("Replay a job trace (CSV) through the real scheduler in virtual time under strict "
            "quotas, idle borrowing, idle borrowing with checkpoints, or elastic jobs.")

    def add_arguments(self, parser):
        parser.add_argument("--jobs", required=True, help="jobs CSV: timestamp, duration, "
                            "num_gpus, cluster [, oversold_type, priority, spot_discount]")
        parser.add_argument("--nodes", required=True,
                            help="virtual clusters CSV: vc, node num [, gpus_per_node]")
        parser.add_argument("--policy", default="all", choices=[*POLICIES, "all"])
        parser.add_argument("--backfill", choices=("on", "off"), default="off",
                            help="on: the head job of each quota's queue that does not fit gets "
                                 "a reservation, and the jobs behind it must not delay it; "
                                 "off: they pass it freely (the quota setting Backfill)")
        parser.add_argument("--ckpt-minutes", type=float, default=30.0,
                            help="checkpoint interval of the borrow-ckpt and elastic policies "
                                 "(minutes)")
        parser.add_argument("--public-nodes", type=int, default=0,
                            help="8-GPU nodes of a public pool for spot jobs (default none)")
        parser.add_argument("--limit", type=int, default=None,
                            help="replay only the first N jobs by submit time")
        parser.add_argument("--out", default="artifacts/replay")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **opts):
        if opts["ckpt_minutes"] <= 0:
            raise CommandError(f"--ckpt-minutes must be above 0, got {opts['ckpt_minutes']}")
        try:
            trace = read_trace(opts["jobs"], opts["nodes"], opts["limit"])
        except (OSError, KeyError, ValueError) as exc:
            raise CommandError(f"Cannot read the trace: {exc}") from exc
        for line, why in trace.invalid[:5]:
            self.stderr.write(f"{opts['jobs']}:{line}: skipped: {why}")
        policies = list(POLICIES) if opts["policy"] == "all" else [opts["policy"]]
        results = [self._replay(trace, p, opts) for p in policies]
        summaries = [summary(r) for r in results]
        reference = reference_for(vc.name for vc in trace.vcs)
        title = (f"Trace replay: {os.path.basename(opts['jobs'])} on "
                 f"{os.path.basename(opts['nodes'])} ({_nodes_gpus(results[0])})")
        paths = write_outputs(opts["out"], results, summaries, title=title, reference=reference,
                              sources={"jobs_csv": opts["jobs"], "nodes_csv": opts["nodes"]})
        for line in text_report(results, summaries, reference):
            self.stdout.write(line)
        self.stdout.write(f"Wrote {', '.join(paths)}")

    def _replay(self, trace, policy, opts):
        with tqdm(total=len(trace.jobs), desc=policy, unit="job",
                  disable=opts["no_progress"], file=self.stderr._out) as bar:
            return replay(trace, policy, opts["ckpt_minutes"], opts["public_nodes"],
                          on_progress=bar.update, backfill=opts["backfill"] == "on")


def _nodes_gpus(result) -> str:
    return f"{result.total_gpus:,} GPUs"

