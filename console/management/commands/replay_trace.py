"""manage.py replay_trace: replay a GPU job trace through scheduler.plan in virtual time.

A thin wrapper: it parses the arguments, calls tracesim, and writes summary.json and
report.html into --out. Example (the Philly trace's jobs and virtual clusters as CSV, in the
format tracesim/trace.py reads; all three policies):

    manage.py replay_trace --jobs philly_jobs.csv \\
        --nodes philly_vc_nodes.csv --policy all --ckpt-minutes 30 \\
        --out artifacts/replay
"""

import json
import os

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from tracesim import POLICIES, read_trace, replay
from tracesim.metrics import summary
from tracesim.report import write_html


class Command(BaseCommand):
    help = ("Replay a job trace (CSV) through the real scheduler in virtual time under strict "
            "quotas, idle borrowing, or idle borrowing with checkpoints.")

    def add_arguments(self, parser):
        parser.add_argument("--jobs", required=True, help="jobs CSV: timestamp, duration, "
                            "num_gpus, cluster [, oversold_type, priority, spot_discount]")
        parser.add_argument("--nodes", required=True,
                            help="virtual clusters CSV: vc, node num [, gpus_per_node]")
        parser.add_argument("--policy", default="all", choices=[*POLICIES, "all"])
        parser.add_argument("--ckpt-minutes", type=float, default=30.0,
                            help="checkpoint interval of the borrow-ckpt policy (minutes)")
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
        os.makedirs(opts["out"], exist_ok=True)
        json_path = os.path.join(opts["out"], "summary.json")
        with open(json_path, "w") as f:
            json.dump({"jobs_csv": opts["jobs"], "nodes_csv": opts["nodes"],
                       "policies": summaries}, f, indent=2)
        html_path = os.path.join(opts["out"], "report.html")
        title = (f"Trace replay: {os.path.basename(opts['jobs'])} on "
                 f"{os.path.basename(opts['nodes'])} ({_nodes_gpus(results[0])})")
        write_html(results, summaries, html_path, title=title)
        for s in summaries:
            self.stdout.write(_line(s))
        self.stdout.write(f"Wrote {json_path} and {html_path}")

    def _replay(self, trace, policy, opts):
        with tqdm(total=len(trace.jobs), desc=policy, unit="job",
                  disable=opts["no_progress"], file=self.stderr._out) as bar:
            return replay(trace, policy, opts["ckpt_minutes"], opts["public_nodes"],
                          on_progress=bar.update)


def _nodes_gpus(result) -> str:
    return f"{result.total_gpus:,} GPUs"


def _line(s: dict) -> str:
    q = s["queueing_delay_s"]
    return (f"{s['policy']:12} jobs {s['jobs_replayed']:,} (skipped {s['jobs_skipped']}) | "
            f"queueing mean {q['mean']:,.0f} s, median {q['median']:,.0f} s, "
            f"p95 {q['p95']:,.0f} s | utilization {s['gpu_utilization']:.1%} "
            f"(useful {s['gpu_utilization_useful']:.1%}) | "
            f"preemptions {s['preemptions']:,}, GPU-hours lost {s['gpu_hours_lost']:,.1f} | "
            f"wall {s['wall_seconds']:.0f} s ({s['cycles']:,} cycles, "
            f"plan {s['plan_seconds']:.0f} s)")
