"""Reading a job trace and its virtual clusters from CSV.

Jobs CSV: `timestamp` (submit, 'YYYY-MM-DD HH:MM:SS' or seconds), `duration` (s), `num_gpus`,
`cluster` (the virtual cluster, a team's quota); optional per-job overrides `oversold_type`
(ForbiddenQuotaOverSold | AcceptQuotaOverSold | ForceQuotaOverSold), `priority` (1-9) and
`spot_discount` (0.1-0.9: a spot job bidding that fraction of the on-demand price).
Nodes CSV: `vc`, `node num`, optional `gpus_per_node` (default 8); one row a virtual cluster.
The pods and nodes CSVs of Alibaba's GPU trace of 2023 are read as well (tracesim/alibaba.py);
for its pods a nodes CSV may add `qos`, the QoS classes (space-separated) a virtual cluster takes.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from scheduler import ACCEPT, FORBIDDEN, FORCE

from . import alibaba

OVERSOLD_TYPES = (FORBIDDEN, ACCEPT, FORCE)
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit: int  # seconds since the first submission of the trace
    duration: int  # seconds of work once all pods run
    gpus: int
    vc: str
    oversold_type: str | None = None  # None: the policy decides
    priority: int = 1
    spot_discount: Decimal | None = None


@dataclass(frozen=True, slots=True)
class VirtualCluster:
    name: str
    nodes: int
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    qos: tuple[str, ...] = ()  # Alibaba pods of these QoS classes are its jobs (tracesim/alibaba.py)


@dataclass
class Trace:
    jobs: list[TraceJob]
    vcs: list[VirtualCluster]
    start: datetime | None = None  # wall-clock time of submit 0, when the trace has dates
    invalid: list[tuple[int, str]] = field(default_factory=list)  # (CSV line, why)


def read_trace(jobs_csv: str, nodes_csv: str, limit: int | None = None) -> Trace:
    vcs = read_vcs(nodes_csv)
    quota_of_qos = {qos: vc.name for vc in vcs for qos in vc.qos}
    rows, invalid = [], []
    with open(jobs_csv, newline="") as f:
        reader = csv.DictReader(f)
        if alibaba.is_pods(reader.fieldnames):
            as_job = functools.partial(alibaba.job_row, quota_of_qos=quota_of_qos)
        elif quota_of_qos:
            raise ValueError(f"{nodes_csv}: the qos column places the pods of Alibaba's GPU trace; "
                             f"{jobs_csv} is a jobs CSV, whose cluster column places each job")
        else:
            as_job = dict
        for line, row in enumerate(reader, start=2):
            try:
                row = as_job(row)
            except (KeyError, ValueError) as exc:
                invalid.append((line, str(exc)))
                continue
            try:
                rows.append((_seconds(row["timestamp"]), line, row))
            except (KeyError, ValueError) as exc:
                invalid.append((line, f"timestamp: {exc}"))
    rows.sort(key=lambda r: (r[0][0], r[1]))  # arrival order; ties keep file order
    rows = rows[:limit] if limit else rows
    t0 = rows[0][0][0] if rows else 0.0
    jobs = []
    for (secs, _), line, row in rows:
        try:
            jobs.append(_job(f"j{line:06d}", round(secs - t0), row))
        except (KeyError, ValueError) as exc:
            invalid.append((line, str(exc)))
    start = rows[0][0][1] if rows else None
    return Trace(jobs, vcs, start, invalid)


def read_vcs(nodes_csv: str) -> list[VirtualCluster]:
    """The virtual clusters, one a row; a name given twice is refused, since a quota has one
    guarantee and one node size (which row would be meant is a guess)."""
    with open(nodes_csv, newline="") as f:
        reader = csv.DictReader(f)
        if alibaba.is_nodes(reader.fieldnames):
            return [VirtualCluster(*alibaba.cluster(list(reader)))]
        out, lines, qos_lines = [], {}, {}
        for line, row in enumerate(reader, start=2):
            name = row["vc"].strip()
            if name in lines:
                raise ValueError(f"{nodes_csv}: virtual cluster {name!r} is named on lines "
                                 f"{lines[name]} and {line}; give each one row")
            lines[name] = line
            qos = tuple((row.get("qos") or "").split())
            for q in qos:
                if q not in alibaba.QOS_MODES:
                    raise ValueError(f"{nodes_csv}:{line}: qos {q!r} is not one of "
                                     f"{', '.join(alibaba.QOS_MODES)}")
                if q in qos_lines:
                    raise ValueError(f"{nodes_csv}: qos {q} is taken on lines {qos_lines[q]} and "
                                     f"{line}; a pod goes to one virtual cluster")
                qos_lines[q] = line
            per_node = (row.get("gpus_per_node") or "").strip()
            out.append(VirtualCluster(name, int(row["node num"]),
                                      int(per_node) if per_node else DEFAULT_GPUS_PER_NODE, qos))
    return out


def _seconds(value: str) -> tuple[float, datetime | None]:
    value = value.strip()
    try:
        return float(value), None
    except ValueError:
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:  # a naive trace time is read as UTC: no DST jumps
            when = when.replace(tzinfo=UTC)
        return when.timestamp(), when


def _job(job_id: str, submit: int, row: dict) -> TraceJob:
    gpus = int(float(row["num_gpus"]))
    if gpus < 1:
        raise ValueError(f"num_gpus must be at least 1, got {row['num_gpus']!r}")
    oversold = (row.get("oversold_type") or "").strip() or None
    if oversold is not None and oversold not in OVERSOLD_TYPES:
        raise ValueError(f"oversold_type must be one of {', '.join(OVERSOLD_TYPES)}, "
                         f"got {oversold!r}")
    priority = int((row.get("priority") or "").strip() or 1)
    if not 1 <= priority <= 9:
        raise ValueError(f"priority must be 1-9, got {priority}")
    discount = (row.get("spot_discount") or "").strip()
    return TraceJob(job_id, submit, max(0, round(float(row["duration"]))), gpus,
                    row["cluster"].strip(), oversold, priority,
                    Decimal(discount) if discount else None)
