"""The simulated cluster: one quota per virtual cluster, nodes of 8 GPUs, pods sized by GPUs.

Philly's jobs request only GPUs. A node is modelled on Philly-era 8-GPU servers (64 vCPU,
488 GiB, like a p3.16xlarge), and a pod gets CPU and memory in proportion to its GPUs, so the
GPU count is always the binding dimension.

The quotas: every virtual cluster (VC) is a child quota of one ECS root quota, the cluster. The root
has no nodes of its own, so each VC's guarantee is exactly its nodes, and the root's tree is the
lending scope (docs/design.md rule 2): idle capacity of one VC can be borrowed by jobs of every
other. Had each VC been a root of its own, its lending scope would be its own nodes and borrowing
between teams could not happen.
"""

from __future__ import annotations

import math

from scheduler import ECS, Node, PodRequest, Quota, Resources

from .trace import VirtualCluster

INSTANCE_TYPE = "philly.8xGPU"
NODE_CPU_M = 64_000
NODE_MEM_MIB = 488 * 1024
ROOT_QUOTA = "cluster"
TENANT = "philly"
PUBLIC_PREFIX = "public"


def per_gpu_share(gpus: int, gpus_per_node: int) -> Resources:
    """`gpus` GPUs with their share of a node's CPU and memory."""
    return Resources(gpus, NODE_CPU_M * gpus // gpus_per_node,
                     NODE_MEM_MIB * gpus // gpus_per_node)


def quota_id(vc: str) -> str:
    return f"vc-{vc}"


def build_quotas(vcs: list[VirtualCluster], backfill: bool = False) -> tuple[Quota, ...]:
    root = Quota(ROOT_QUOTA, TENANT, None, ECS)
    return (root,) + tuple(Quota(quota_id(vc.name), TENANT, ROOT_QUOTA, ECS, backfill=backfill)
                           for vc in vcs)


def build_nodes(vcs: list[VirtualCluster], public_nodes: int = 0,
                public_gpus_per_node: int = 8) -> tuple[Node, ...]:
    nodes = []
    for vc in vcs:
        cap = per_gpu_share(vc.gpus_per_node, vc.gpus_per_node)
        nodes += [Node(f"{vc.name}-{i:04d}", INSTANCE_TYPE, cap, quota_id(vc.name))
                  for i in range(vc.nodes)]
    cap = per_gpu_share(public_gpus_per_node, public_gpus_per_node)
    nodes += [Node(f"{PUBLIC_PREFIX}-{i:04d}", INSTANCE_TYPE, cap, None)
              for i in range(public_nodes)]
    return tuple(nodes)


def gang(gpus: int, gpus_per_node: int) -> tuple[PodRequest, ...]:
    """A job of `gpus` GPUs: one pod if it fits a node, else ceil(gpus / node) pods of a full
    node each, the rest on the last pod."""
    count = max(1, math.ceil(gpus / gpus_per_node))
    sizes = [gpus_per_node] * (count - 1) + [gpus - gpus_per_node * (count - 1)]
    return tuple(PodRequest("worker", i, per_gpu_share(g, gpus_per_node), INSTANCE_TYPE)
                 for i, g in enumerate(sizes))
