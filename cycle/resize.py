"""Step 4 of a schedule cycle, for elastic jobs: carry out the Shrink and Growth decisions.

A shrink's pods are already stopping (cycle/apply.py stops them as Shrunk); a growth's pods are
bound here as an admission binds them, and left unstarted. Either way jobs.elastic.begin_resize
then stops the workers the job keeps, and once they are gone all of them start at the new world
size. Few jobs resize in a cycle, so this goes job by job.
"""

from __future__ import annotations

import scheduler
from jobs import dispatch, elastic
from jobs.models import Job, Pod
from quotas.models import Node


def apply(shrinks: tuple[scheduler.Shrink, ...], growths: tuple[scheduler.Growth, ...], now
          ) -> list[dispatch.Message]:
    if not shrinks and not growths:
        return []
    # Locked in pk order with their pods, as every writer does; a job stopped since the snapshot
    # was read is not resized.
    jobs = {j.job_id: j for j in Job.objects.filter(job_id__in={r.job_id for r in (*shrinks, *growths)},
                                                    status__in=elastic.ACTIVE).locked()}
    messages = []
    for s in shrinks:
        if s.job_id in jobs:
            messages += elastic.begin_resize(jobs[s.job_id], s.message, now)
    for g in growths:
        if g.job_id in jobs and (bound := _bind(g, now)):
            message = f"Grew from {g.workers_from} to {g.workers_to} workers: idle capacity is free"
            messages += elastic.begin_resize(jobs[g.job_id], message, now, new=bound)
    return messages


def _bind(growth: scheduler.Growth, now) -> list[int]:
    """Bind the growth's pods, returning their pks; none when they are not all waiting unbound."""
    pods = elastic.unbound_workers([growth.job_id])
    nodes = dict(Node.objects.filter(name__in={p.node for p in growth.placements}).values_list("name", "pk"))
    wanted = [(pods.get((growth.job_id, p.role, p.index)), p) for p in growth.placements]
    if any(pk is None for pk, _ in wanted):
        return []
    for pk, p in wanted:
        if not Pod.objects.filter(pk=pk, node__isnull=True).update(
                node_id=nodes[p.node], gpu_indices=list(p.gpu_indices), kind=growth.kind, bound_at=now):
            # the snapshot and the rows disagree: roll the whole cycle back, as an admission does
            raise RuntimeError(f"pod {p.role} {p.index} of {growth.job_id} was not waiting to be bound")
    return [pk for pk, _ in wanted]
