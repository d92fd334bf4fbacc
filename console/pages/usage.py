"""The Quotas page's usage bars, from jobs.usage (the same accounting ListQuotas and GetQuota report).

A quota with GPUs is measured in GPUs, a CPU-only one in vCPUs. A bar spans the guarantee and, after
it, what the quota borrows elsewhere: used and lent fill the guarantee, borrowed lies beyond it.
"""

from jobs.usage import usage_by_quota


def quota_usage(quotas) -> dict[int, dict]:
    usage = usage_by_quota()
    return {q.pk: view(usage[q.pk]) for q in quotas}


def view(u) -> dict:
    if u.capacity.gpu:
        unit, amount = "GPUs", lambda r: r.gpu
    else:
        unit, amount = "vCPUs", lambda r: r.cpu_m // 1000
    guaranteed, used, lent, borrowed = (amount(r) for r in (u.capacity, u.guaranteed_used, u.lent, u.borrowed))
    return {"unit": unit, "guaranteed": guaranteed, "used": used, "lent": lent, "borrowed": borrowed,
            **bars(guaranteed, used, lent, borrowed)}


def bars(guaranteed, used, lent, borrowed) -> dict:
    """Widths in percent of the whole bar (the guarantee plus what is borrowed)."""
    span = guaranteed + borrowed
    if not span:
        return {"used_pct": 0, "lent_pct": 0, "free_pct": 0, "borrowed_pct": 0}
    pct = lambda n: round(100 * n / span)  # noqa: E731
    used_pct = min(pct(guaranteed), pct(used))
    lent_pct = min(pct(guaranteed) - used_pct, pct(lent))
    return {"used_pct": used_pct, "lent_pct": lent_pct, "free_pct": pct(guaranteed) - used_pct - lent_pct,
            "borrowed_pct": 100 - pct(guaranteed)}
