"""Wait reasons in user terms, with the numbers (docs/design.md rule 9).

Each function returns (code, message). They read the cycle's running totals, so they are cheap;
the few that scan a scope's nodes are cached by the scope's version in plan.py.
"""

from __future__ import annotations

from .capacity import CapacityView, Scope
from .decisions import (
    GANG_DOES_NOT_FIT, NEVER_FITS, NO_IDLE_CAPACITY, NO_STOCK, PARENT_QUOTA_FULL, QUOTA_FULL,
)
from .model import KIND_IDLE, PendingJob
from .placement import never_fits_cached
from .quota_tree import QuotaTree
from .resources import Resources, fmt_dim

DIM_WORD = {"gpu": "GPU", "cpu_m": "CPU", "mem_mib": "memory"}


def quota_full(tree: QuotaTree, qid: str, need: Resources) -> tuple[str, str] | None:
    """The job's own quota or an ancestor has no room left in its guarantee."""
    short = tree.short_quota(qid, need)
    if short is None:
        return None
    q, dim = short
    used, limit = getattr(tree.usage[q], dim), getattr(tree.guarantee[q], dim)
    who = f"Quota {q}" if q == qid else f"Parent quota {q}"
    held = getattr(tree.held[q], dim)
    held = f" ({fmt_dim(dim, held)} of it held for jobs waiting for pods to terminate)" if held else ""
    msg = (f"{who} is full: {fmt_dim(dim, used)} of {fmt_dim(dim, limit)} guaranteed in use{held}, "
           f"this job needs {fmt_dim(dim, getattr(need, dim))}")
    return (QUOTA_FULL if q == qid else PARENT_QUOTA_FULL), msg


def no_room(view: CapacityView, scope: Scope, job: PendingJob, need: Resources, where: str,
            short_code: str = NO_IDLE_CAPACITY, short_text: str = "No idle capacity in",
            ) -> tuple[str, str]:
    """Why the gang does not fit the free capacity of a scope."""
    for req in job.pods:
        if never_fits_cached(view, scope, req, view.memo):
            return NEVER_FITS, (f"Pod {req.role}-{req.index} needs {req.resources.describe()}"
                                f"{_of_type(req.instance_type)}, more than any node of {where}")
    free = Resources(*scope.free)
    dim = need.first_short(free)
    if dim:
        return short_code, (f"{short_text} {where}: "
                            f"{fmt_dim(dim, getattr(free, dim))} free of "
                            f"{fmt_dim(dim, scope.capacity[_index(dim)])}, "
                            f"this job needs {fmt_dim(dim, getattr(need, dim))}")
    largest = largest_free_gpus(view, scope)
    return GANG_DOES_NOT_FIT, (f"The gang of {len(job.pods)} pod(s) ({need.gpu} GPU) does not "
                               f"fit any set of nodes of {where}: {free.gpu} GPU free in total "
                               f"but at most {largest} GPU free on one node")


def largest_free_gpus(view: CapacityView, scope: Scope) -> int:
    key = ("largest", scope.key, scope.version)
    found = view.memo.get(key)
    if found is None:
        found = view.memo[key] = max((view.states[n].free[0] for n in scope.names), default=0)
    return found


def lent_out(view: CapacityView, scope: Scope) -> Resources:
    """Capacity of a scope's nodes that idle pods (borrowers) hold."""
    gpu = cpu = mem = 0
    for name in scope.names:
        g, c, m = _lent_on(view, name)
        gpu, cpu, mem = gpu + g, cpu + c, mem + m
    return Resources(gpu, cpu, mem)


def _lent_on(view: CapacityView, name: str) -> tuple[int, int, int]:
    """Idle pods' capacity on one node; its running pods change only when one is preempted
    (and joins the terminating ones), so that count keys the memo."""
    state = view.states[name]
    key = ("lent", name, len(state.terminating))
    found = view.memo.get(key)
    if found is None:
        gpu = cpu = mem = 0
        for pod in state.pods:
            if pod.kind == KIND_IDLE:
                gpu, cpu, mem = (gpu + pod.resources.gpu, cpu + pod.resources.cpu_m,
                                 mem + pod.resources.mem_mib)
        found = view.memo[key] = (gpu, cpu, mem)
    return found


def no_stock(view: CapacityView, scope: Scope, job: PendingJob, need: Resources,
             itype: str) -> tuple[str, str]:
    code, msg = no_room(view, scope, job, need, f"the public pool of {itype}", NO_STOCK,
                        "No stock in")
    return NO_STOCK, msg


def _of_type(itype: str | None) -> str:
    return f" on {itype}" if itype else ""


def _index(dim: str) -> int:
    return ("gpu", "cpu_m", "mem_mib").index(dim)
