"""The quota tree as the database holds it: each quota's chain up to its root and its subtree.

A quota's guarantee is its own nodes and its sub-quotas' (scheduler/quota_tree.py), so whatever is
summed per quota is summed over these subtrees.
"""

from __future__ import annotations

from quotas.models import Quota


def chains() -> dict[int, tuple[int, ...]]:
    """Quota pk -> the quota's pk, then its ancestors' up to the root."""
    parent = dict(Quota.objects.values_list("pk", "parent_id"))
    out = {}
    for pk, up in parent.items():
        chain = [pk]
        while up is not None and up not in chain:  # a broken loop ends the walk
            chain.append(up)
            up = parent.get(up)
        out[pk] = tuple(chain)
    return out


def subtrees() -> dict[int, set[int]]:
    """Quota pk -> the pks of the quota and all its descendants."""
    chain = chains()
    out: dict[int, set[int]] = {pk: set() for pk in chain}
    for pk, ups in chain.items():
        for up in ups:
            out[up].add(pk)
    return out
