"""The Alibaba PAI GPU trace of 2023 (clusterdata cluster-trace-gpu-v2023, "openb") read as a
replay trace: its pods CSV as the jobs, its nodes CSV as the cluster.

- A pod with GPUs is a job: submitted at `creation_time`, running from `scheduled_time` to
  `deletion_time` (a pod still Running when the trace ends runs until then). A pod sharing a
  GPU (`gpu_milli` under 1000) holds a whole one: the scheduler allocates whole GPUs. CPU pods
  and pods never scheduled (no run time) are reported as skipped rows.
- The pod's QoS sets its Idle Resources mode, as the trace's own `oversold_type` would:
  latency-sensitive (LS) and Guaranteed pods use their guarantee only, Burstable ones may also
  borrow, best-effort (BE) ones run on idle capacity only.
- The trace names no teams, so with its own nodes CSV the cluster is one quota, OPENB, of all its
  GPUs in 8-GPU nodes (6,212 GPUs on 1,213 nodes of 1 to 8 make 776 nodes): the replay models
  quotas, not the fragmentation of small nodes. So little demand for so many GPUs queues nothing.
- With a virtual clusters CSV whose `qos` column names the QoS classes each one takes (say
  `ls,6,LS Guaranteed Burstable` and `be,0,BE`), each pod goes to the quota of its QoS instead:
  a slice where latency-sensitive pods are one team's guaranteed jobs on 48 GPUs and best-effort
  pods another team's Only Idle jobs, which borrow the first team's idle GPUs.
"""

from __future__ import annotations

from scheduler import ACCEPT, FORBIDDEN, FORCE

POD_COLUMNS = {"creation_time", "scheduled_time", "deletion_time", "num_gpu", "qos"}
NODE_COLUMNS = {"sn", "gpu"}
OPENB = "openb"
GPUS_PER_NODE = 8
QOS_MODES = {"LS": FORBIDDEN, "Guaranteed": FORBIDDEN, "Burstable": ACCEPT, "BE": FORCE}


def is_pods(columns) -> bool:
    return POD_COLUMNS <= set(columns or ())


def is_nodes(columns) -> bool:
    return NODE_COLUMNS <= set(columns or ())


def job_row(pod: dict, quota_of_qos: dict[str, str] | None = None) -> dict:
    """A pod row as a row of the jobs CSV (tracesim/trace.py): of OPENB, or with `quota_of_qos`
    of the virtual cluster that takes its QoS."""
    if int(pod["num_gpu"]) < 1:
        raise ValueError("num_gpu is 0: a CPU pod (the replay schedules GPUs)")
    if not pod["scheduled_time"].strip():
        raise ValueError(f"never scheduled in the trace ({pod['pod_phase']}): no run time")
    qos = pod["qos"].strip()
    if qos not in QOS_MODES:
        raise ValueError(f"qos must be one of {', '.join(QOS_MODES)}, got {qos!r}")
    if quota_of_qos and qos not in quota_of_qos:
        raise ValueError(f"qos {qos} is taken by no virtual cluster (their qos column names "
                         f"{', '.join(quota_of_qos)})")
    return {"timestamp": pod["creation_time"], "num_gpus": pod["num_gpu"],
            "cluster": quota_of_qos[qos] if quota_of_qos else OPENB,
            "duration": int(pod["deletion_time"]) - int(pod["scheduled_time"]),
            "oversold_type": QOS_MODES[qos]}


def cluster(nodes: list[dict]) -> tuple[str, int, int]:
    """(virtual cluster, nodes, GPUs per node) of the whole trace's nodes."""
    gpus = sum(int(n["gpu"]) for n in nodes)
    return OPENB, round(gpus / GPUS_PER_NODE), GPUS_PER_NODE
