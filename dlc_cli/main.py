"""`dlc`: the command line. Exit status 0 on success, 1 when the API refuses or a call fails (one line
on stderr with the API's Code and Message), 2 for a usage error (argparse's usage line)."""

from __future__ import annotations

import argparse
import sys

from dlc_cli import client, commands, config, submit
from dlc_cli.errors import Failure


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="table for people (default), json (the API's answer) for scripts")
    parser = argparse.ArgumentParser(prog="dlc", description="Jobs, quotas, nodes and spot prices of an "
                                     "OpenDLC or PAI-DLC workspace, through the official PAI SDKs.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    cfg = verbs.add_parser("config", parents=[common], help="set or show endpoint, AccessKey, workspace, region",
                           description=f"Saved in {config.path()} (mode 0600); without flags, shows it.")
    cfg.add_argument("--endpoint", help="e.g. http://127.0.0.1:8000 (a bare host:port means https)")
    cfg.add_argument("--access_id", help="AccessKey id")
    cfg.add_argument("--access_key", help="AccessKey secret")
    cfg.add_argument("--workspace_id")
    cfg.add_argument("--region", help="e.g. cn-hangzhou")
    _leaf(cfg, commands.do_config, needs_settings=False)

    sub = verbs.add_parser("submit", help="submit a job", description="Submit a job.")
    kinds = sub.add_subparsers(dest="job_type", required=True, metavar="JOB_TYPE")
    for name in submit.JOB_TYPES:
        kind = kinds.add_parser(name, parents=[common], help=f"submit a {submit.JOB_TYPES[name]}",
                                description=f"Submit a {submit.JOB_TYPES[name]}; prints its id.")
        submit.add_flags(kind)
        _leaf(kind, commands.do_submit)

    _add_get(verbs, common)
    for verb, run, says in (("stop", commands.do_stop_job, "stop"), ("delete", commands.do_delete_job, "delete")):
        what = verbs.add_parser(verb, help=f"{says} a job", description=f"{says.capitalize()} a job.")
        job = what.add_subparsers(dest="what", required=True, metavar="job").add_parser(
            "job", parents=[common], help=f"{says} a job", description=f"{says.capitalize()} a job.")
        job.add_argument("job_id", metavar="JOB_ID")
        _leaf(job, run)

    logs = verbs.add_parser("logs", parents=[common], help="print a pod's log",
                            description="Print a pod's log (the job's first pod unless POD is named).")
    logs.add_argument("job_id", metavar="JOB_ID")
    logs.add_argument("pod_id", metavar="POD", nargs="?")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")
    logs.add_argument("--max_lines", type=int, metavar="N", help="at most the first N lines")
    _leaf(logs, commands.do_logs)

    price = verbs.add_parser("price", parents=[common], help="an instance type's spot price history",
                             description="Spot price history of an instance type, as a terminal chart.")
    price.add_argument("instance_type", metavar="INSTANCE_TYPE")
    price.add_argument("--days", type=int, choices=range(1, 8), default=3, metavar="1..7",
                       help="how far back (default 3, at most 7)")
    _leaf(price, commands.do_price)
    return parser


def _leaf(parser, run, **defaults) -> None:
    parser.set_defaults(run=run, leaf=parser, **defaults)


def _add_get(verbs, common) -> None:
    get = verbs.add_parser("get", help="show jobs, quotas or nodes", description="Show jobs, quotas or nodes.")
    what = get.add_subparsers(dest="what", required=True, metavar="{job,jobs,quotas,nodes}")
    job = what.add_parser("job", parents=[common], help="one job with its pods", description="One job with its pods.")
    job.add_argument("job_id", metavar="JOB_ID")
    _leaf(job, commands.do_get_job)
    jobs = what.add_parser("jobs", parents=[common], help="the workspace's jobs of the last 7 days",
                           description="The configured workspace's jobs of the last 7 days, newest first.")
    jobs.add_argument("--status", help="e.g. Running, Queuing, Succeeded")
    jobs.add_argument("--name", help="jobs whose name contains this")
    _leaf(jobs, commands.do_get_jobs)
    quotas = what.add_parser("quotas", parents=[common], help="resource quotas",
                             description="Resource quotas with their nodes and GPUs.")
    _leaf(quotas, commands.do_get_quotas)
    nodes = what.add_parser("nodes", parents=[common], help="nodes", description="Nodes and what runs on them.")
    nodes.add_argument("--quota_id", help="only the nodes of this quota's tree")
    _leaf(nodes, commands.do_get_nodes)
    for listing in (jobs, quotas, nodes):
        listing.add_argument("--page_number", type=int, default=1, metavar="N",
                             help=f"pages of {commands.PAGE_SIZE} (default 1)")


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)  # exits 2 with a usage line on a bad flag
    if unknown:  # said by the verb's own parser, so the usage line is the verb's
        args.leaf.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        settings = config.load() if getattr(args, "needs_settings", True) else {}
        return args.run(args, settings)
    except client.SDK_ERRORS as e:
        print(f"dlc: {client.describe(e)}", file=sys.stderr)
    except Failure as e:
        print(f"dlc: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1
