"""`dlc submit`: PAI's DLC command-line flags (`--worker_image`, `--spot_discount_limit`, ...) turned
into the CreateJob request body the SDK sends. The server judges the values; this only shapes them."""

from __future__ import annotations

import argparse

JOB_TYPES = {"pytorchjob": "PyTorchJob", "tfjob": "TFJob", "mpijob": "MPIJob", "xgboostjob": "XGBoostJob",
             "rayjob": "RayJob", "slurmjob": "SlurmJob"}
OVERSOLD_TYPES = ("AcceptQuotaOverSold", "ForbiddenQuotaOverSold", "ForceQuotaOverSold")


def key_values(text: str) -> dict[str, str]:
    """`k1=v1,k2=v2`, PAI's format for --envs; a usage error (exit 2) when malformed."""
    pairs = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...], got {item!r}")
        pairs[key.strip()] = value
    return pairs


def id_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True, help="the job's display name")
    parser.add_argument("--command", required=True, help="the command every pod runs")
    parser.add_argument("--workspace_id", help="default: the configured workspace")
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="number of worker pods (default 1)")
    parser.add_argument("--worker_image", required=True, metavar="IMAGE")
    parser.add_argument("--worker_spec", metavar="INSTANCE_TYPE", help="an instance type, e.g. ecs.g7.xlarge")
    parser.add_argument("--worker_gpu", metavar="N", help="GPUs per worker (with --resource_id)")
    parser.add_argument("--worker_cpu", metavar="N", help="vCPUs per worker (with --resource_id)")
    parser.add_argument("--worker_memory", metavar="SIZE", help="memory per worker, e.g. 32Gi (with --resource_id)")
    parser.add_argument("--resource_id", metavar="QUOTA_ID", help="run on this resource quota")
    parser.add_argument("--oversold_type", choices=OVERSOLD_TYPES, help="whether the job may run on idle resources")
    parser.add_argument("--priority", type=int, help="1 (lowest) to 9")
    bid = parser.add_mutually_exclusive_group()
    bid.add_argument("--spot_discount_limit", type=float, metavar="RATIO",
                     help="bid on spot: the highest price as a share of on-demand (0.1 ... 0.9)")
    bid.add_argument("--spot_price_limit", type=float, metavar="PRICE", help="bid on spot: the highest price")
    parser.add_argument("--data_sources", type=id_list, metavar="ID[,ID...]", help="dataset ids to mount")
    parser.add_argument("--envs", type=key_values, metavar="K=V[,K=V...]", help="environment variables")


def request_body(job_type: str, args: argparse.Namespace, default_workspace: str | None) -> dict:
    """The CreateJob body for the parsed flags; flags not given are left out."""
    worker = {"Type": "Worker", "PodCount": args.workers, "Image": args.worker_image, "EcsSpec": args.worker_spec}
    resources = {"GPU": args.worker_gpu, "CPU": args.worker_cpu, "Memory": args.worker_memory}
    if any(resources.values()):
        worker["ResourceConfig"] = _given(resources)
    spot = {"SpotDiscountLimit": args.spot_discount_limit, "SpotPriceLimit": args.spot_price_limit}
    if any(v is not None for v in spot.values()):
        worker["SpotSpec"] = {"SpotStrategy": "SpotWithPriceLimit", **_given(spot)}
    body = {
        "DisplayName": args.name, "JobType": JOB_TYPES[job_type], "UserCommand": args.command,
        "WorkspaceId": args.workspace_id or default_workspace, "ResourceId": args.resource_id,
        "Priority": args.priority, "Envs": args.envs, "JobSpecs": [_given(worker)],
        "DataSources": [{"DataSourceId": i} for i in args.data_sources] if args.data_sources else None,
        "Settings": {"OversoldType": args.oversold_type} if args.oversold_type else None,
    }
    return _given(body)


def _given(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if v is not None}
