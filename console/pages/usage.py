"""The Quotas page's usage bars, from jobs.usage (the same accounting ListQuotas and GetQuota report).

A quota with GPUs is measured in GPUs, a CPU-only one in vCPUs.
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
    guaranteed, used, lent = amount(u.capacity), amount(u.guaranteed_used), amount(u.lent)
    return {"unit": unit, "guaranteed": guaranteed, "used": used, "lent": lent, "borrowed": amount(u.borrowed),
            **bars(guaranteed, used, lent)}


def bars(guaranteed, used, lent) -> dict:
    if not guaranteed:
        return {"used_pct": 0, "lent_pct": 0}
    used_pct = min(100, round(100 * used / guaranteed))
    return {"used_pct": used_pct, "lent_pct": min(100 - used_pct, round(100 * lent / guaranteed))}
