"""The verbs: each takes the parsed arguments and the settings, calls the API through the official
SDKs, prints a table (or the API's JSON with --output json) and returns the exit status."""

from __future__ import annotations

import shutil
import sys
import time
from datetime import UTC, datetime, timedelta

from alibabacloud_pai_dlc20201203 import models as dlc_models
from alibabacloud_paistudio20220112 import models as studio_models

from dlc_cli import client, config, render, submit
from dlc_cli.errors import Failure
from dlc_cli.render import field

PAGE_SIZE = 100
FINISHED = {"Succeeded", "Failed", "Stopped"}  # a followed log ends with its job
FOLLOW_INTERVAL_S = 2.0
FOLLOW_MAX_LINES = 100000  # GetPodLogs reads from the first line: a follow asks for all there may be

JOB_COLUMNS = [("JOB ID", field("JobId")), ("NAME", field("DisplayName")), ("TYPE", field("JobType")),
               ("STATUS", field("Status")), ("GPU", field("RequestGPU")), ("QUOTA", field("ResourceId")),
               ("CREATED", field("GmtCreateTime"))]
JOB_FIELDS = [("Job", field("JobId")), ("Name", field("DisplayName")), ("Type", field("JobType")),
              ("Status", field("Status")), ("Reason", field("ReasonMessage")),
              ("Workspace", field("WorkspaceName")), ("Quota", field("ResourceId")), ("Priority", field("Priority")),
              ("Command", field("UserCommand")), ("Created", field("GmtCreateTime")),
              ("Running", field("GmtRunningTime")), ("Finished", field("GmtFinishTime"))]
POD_COLUMNS = [("POD", field("PodId")), ("TYPE", field("Type")), ("STATUS", field("Status")),
               ("NODE", field("NodeName")), ("STARTED", field("GmtStartTime"))]
QUOTA_COLUMNS = [("QUOTA ID", field("QuotaId")), ("NAME", field("QuotaName")), ("TYPE", field("ResourceType")),
                 ("PARENT", field("ParentQuotaId")),
                 ("NODES", lambda q: [f"{s['Count']}x{s['Type']}" for s in field("Min", "NodeSpecs")(q) or []]),
                 ("GPU USED", field("QuotaDetails", "UsedQuota", "GPU")),
                 ("GPU GUARANTEED", field("QuotaDetails", "ActualMinQuota", "GPU"))]
NODE_COLUMNS = [("NODE", field("NodeName")), ("TYPE", field("NodeType")), ("STATUS", field("NodeStatus")),
                ("GPU", field("GPU")), ("GPU USED", field("RequestGPU")), ("GPU TYPE", field("GPUType")),
                ("QUOTAS", lambda n: [q.get("QuotaName") for q in n.get("BoundQuotas") or []]),
                ("WORKLOADS", field("WorkloadNum"))]


def show(args, body: dict, text: str) -> None:
    print(render.as_json(body) if args.output == "json" else text)


def do_config(args, settings) -> int:
    changes = {"endpoint": args.endpoint, "access_key_id": args.access_id, "access_key_secret": args.access_key,
               "workspace_id": args.workspace_id, "region": args.region}
    if any(v is not None for v in changes.values()):
        print(f"saved to {config.write_file(changes)}", file=sys.stderr)
    stored = config.read_file()
    if stored.get("access_key_secret"):
        stored["access_key_secret"] = "****"  # shown back to no one, the terminal's scrollback included
    show(args, stored, render.pairs(stored, [(name, field(name)) for name in config.SETTINGS]))
    return 0


def do_submit(args, settings) -> int:
    body = submit.request_body(args.job_type, args, settings.get("workspace_id"))
    request = dlc_models.CreateJobRequest().from_map(body)
    answer = client.dlc(settings).create_job(request).body.to_map()
    show(args, answer, answer["JobId"])
    return 0


def do_get_job(args, settings) -> int:
    body = client.dlc(settings).get_job(args.job_id, dlc_models.GetJobRequest()).body.to_map()
    pods = body.get("Pods") or []
    show(args, body, render.pairs(body, JOB_FIELDS) + ("\n\n" + render.table(pods, POD_COLUMNS) if pods else ""))
    return 0


def do_get_jobs(args, settings) -> int:
    request = dlc_models.ListJobsRequest(workspace_id=settings.get("workspace_id"), status=args.status,
                                         display_name=args.name, page_number=args.page_number, page_size=PAGE_SIZE)
    body = client.dlc(settings).list_jobs(request).body.to_map()
    jobs = body.get("Jobs") or []
    show(args, body, render.table(jobs, JOB_COLUMNS))
    _say_if_more(args.page_number, len(jobs), body.get("TotalCount"))
    return 0


def do_get_quotas(args, settings) -> int:
    request = studio_models.ListQuotasRequest(page_number=args.page_number, page_size=PAGE_SIZE)
    body = client.studio(settings).list_quotas(request).body.to_map()
    show(args, body, render.table(body.get("Quotas") or [], QUOTA_COLUMNS))
    _say_if_more(args.page_number, len(body.get("Quotas") or []), body.get("TotalCount"))
    return 0


def do_get_nodes(args, settings) -> int:
    request = studio_models.ListNodesRequest(quota_id=args.quota_id, page_number=args.page_number,
                                             page_size=PAGE_SIZE)
    body = client.studio(settings).list_nodes(request).body.to_map()
    show(args, body, render.table(body.get("Nodes") or [], NODE_COLUMNS))
    _say_if_more(args.page_number, len(body.get("Nodes") or []), body.get("TotalCount"))
    return 0


def do_stop_job(args, settings) -> int:
    body = client.dlc(settings).stop_job(args.job_id).body.to_map()
    show(args, body, f"stopping {body.get('JobId') or args.job_id}")
    return 0


def do_delete_job(args, settings) -> int:
    body = client.dlc(settings).delete_job(args.job_id).body.to_map()
    show(args, body, f"deleted {body.get('JobId') or args.job_id}")
    return 0


def do_logs(args, settings) -> int:
    dlc = client.dlc(settings)
    pod_id = args.pod_id or _first_pod(dlc, args.job_id)
    request = dlc_models.GetPodLogsRequest(max_lines=args.max_lines or (FOLLOW_MAX_LINES if args.follow else None))
    printed = 0
    while True:
        finished = args.follow and _status(dlc, args.job_id) in FINISHED  # read before the log: no line missed
        lines = dlc.get_pod_logs(args.job_id, pod_id, request).body.logs or []
        for line in lines[printed:]:
            print(line, flush=True)
        printed = max(printed, len(lines))
        if not args.follow or finished:
            return 0
        time.sleep(FOLLOW_INTERVAL_S)


def do_price(args, settings) -> int:
    end = datetime.now(UTC).replace(microsecond=0)
    iso = "%Y-%m-%dT%H:%M:%SZ"
    request = studio_models.GetSpotPriceHistoryRequest(
        start_time=(end - timedelta(days=args.days)).strftime(iso), end_time=end.strftime(iso))
    body = client.studio(settings).get_spot_price_history(args.instance_type, request).body.to_map()
    show(args, body, price_chart(args.instance_type, args.days, body.get("SpotPriceHistory") or []))
    return 0


def price_chart(instance_type: str, days: int, items: list[dict]) -> str:
    """A sparkline of the spot discount (the price as a share of on-demand), with its range."""
    if not items:
        return f"{instance_type}: no spot prices in the last {days} day(s)"
    values = [item["SpotDiscount"] for item in items]
    width = max(20, min(shutil.get_terminal_size().columns, 200) - 2)
    return "\n".join([
        f"{instance_type}: spot price as a share of on-demand, last {days} day(s)",
        render.sparkline(values, width),
        f"{items[0]['Timestamp']} .. {items[-1]['Timestamp']}",
        f"low {min(values):.2f}  high {max(values):.2f}  now {values[-1]:.2f}  ({len(values)} prices)",
    ])


def _first_pod(dlc, job_id: str) -> str:
    pods = dlc.get_job(job_id, dlc_models.GetJobRequest()).body.pods or []
    if not pods:
        raise Failure(f"job {job_id} has no pods yet; name one with `dlc logs {job_id} POD`")
    return pods[0].pod_id


def _status(dlc, job_id: str) -> str:
    return dlc.get_job(job_id, dlc_models.GetJobRequest()).body.status


def _say_if_more(page: int, shown: int, total: int | None) -> None:
    if total is not None and (page - 1) * PAGE_SIZE + shown < total:
        print(f"{shown} of {total} shown; --page_number {page + 1} for more", file=sys.stderr)
