"""The demo cluster: a tenant, two workspaces, quotas with simulated nodes, a public pool, three users."""

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from quotas.models import (
    AgentCredential, Executor, Membership, Node, Quota, ResourceSpec, ResourceType, Role, Tenant, Workspace,
)

DEMO_PASSWORD = "opendlc-demo"

# instance type, resource type, vCPU, memory GiB, GPUs, GPU type, on-demand price per node-minute
SPECS = [
    ("ecs.g7.xlarge", ResourceType.ECS, 4, 16, 0, "", "0.016500"),
    ("ecs.gn7i-c8g1.2xlarge", ResourceType.ECS, 8, 30, 1, "NVIDIA A10", "0.147000"),
    ("ecs.gn6v-c8g1.16xlarge", ResourceType.ECS, 64, 256, 8, "NVIDIA V100", "1.050000"),
    ("ml.gu7xf.c96m1600.8-gu108", ResourceType.LINGJUN, 96, 1600, 8, "GU108", "2.100000"),
]

# quota name, parent, resource type, workspaces, {instance type: node count}
QUOTAS = [
    ("ml-platform", None, ResourceType.ECS, ["ml-research", "vision-lab"], {}),
    ("nlp-team", "ml-platform", ResourceType.ECS, ["ml-research"], {"ecs.gn6v-c8g1.16xlarge": 2}),
    ("cv-team", "ml-platform", ResourceType.ECS, ["vision-lab"], {"ecs.gn6v-c8g1.16xlarge": 2}),
    ("llm-pretrain", None, ResourceType.LINGJUN, ["ml-research"], {"ml.gu7xf.c96m1600.8-gu108": 2}),
    ("llm-finetune", None, ResourceType.LINGJUN, ["vision-lab"], {"ml.gu7xf.c96m1600.8-gu108": 1}),
]

PUBLIC_POOL = {
    "ecs.g7.xlarge": 4,
    "ecs.gn7i-c8g1.2xlarge": 6,
    "ecs.gn6v-c8g1.16xlarge": 2,
    "ml.gu7xf.c96m1600.8-gu108": 2,
}


@dataclass
class Seeded:
    created: bool
    access_key_id: str = ""
    access_key_secret: str = ""
    workspace_id: int = 0


def is_seeded() -> bool:
    return Tenant.objects.filter(name="demo").exists()


@transaction.atomic
def seed(price_history: bool = True) -> Seeded:
    """Create the demo once. `price_history` backfills a week of spot prices (a few seconds)."""
    if is_seeded():
        return Seeded(created=False)
    from apikit.models import AccessKey

    tenant = Tenant.objects.create(name="demo")
    users = _users()
    workspaces = _workspaces(tenant, users)
    specs = {
        it: ResourceSpec.objects.create(
            instance_type=it, resource_type=rt, cpu=cpu, memory_mib=mem * 1024, gpu=gpu, gpu_type=gtype,
            on_demand_price_per_minute=Decimal(price),
        )
        for it, rt, cpu, mem, gpu, gtype, price in SPECS
    }
    _quotas(tenant, workspaces, specs)
    for instance_type, count in PUBLIC_POOL.items():
        _nodes(f"pub-{_short(instance_type)}", specs[instance_type], None, count)
    if price_history:
        from spot.backfill import backfill_history

        # A week of spot prices for the History Price chart, once the seed has committed.
        transaction.on_commit(lambda: backfill_history(days=7))
    key, secret = AccessKey.issue(users["alice"])
    return Seeded(True, key.access_key_id, secret, workspaces["ml-research"].pk)


def _users() -> dict:
    User = get_user_model()
    users = {}
    for name in ("alice", "bob", "charlie"):
        user = User.objects.create_user(name, f"{name}@example.com", DEMO_PASSWORD)
        users[name] = user
    users["alice"].is_staff = users["alice"].is_superuser = True  # the quota admin
    users["alice"].save()
    return users


def _workspaces(tenant, users) -> dict:
    research = Workspace.objects.create(tenant=tenant, name="ml-research", description="Shared research workspace")
    vision = Workspace.objects.create(tenant=tenant, name="vision-lab", description="Alice's vision projects")
    Membership.objects.create(workspace=research, user=users["alice"], role=Role.OWNER, is_default=True)
    Membership.objects.create(workspace=research, user=users["bob"], role=Role.MEMBER, is_default=True)
    Membership.objects.create(workspace=vision, user=users["alice"], role=Role.OWNER)
    return {"ml-research": research, "vision-lab": vision}


def _quotas(tenant, workspaces, specs) -> None:
    made = {}
    for number, (name, parent, rtype, ws_names, nodes) in enumerate(QUOTAS, start=1):
        quota = Quota.objects.create(
            quota_id=f"quota{number:08d}", name=name, tenant=tenant, resource_type=rtype,
            parent=made.get(parent),
        )
        quota.workspaces.set([workspaces[w] for w in ws_names])
        made[name] = quota
        for instance_type, count in nodes.items():
            _nodes(f"{name}-{_short(instance_type)}", specs[instance_type], quota, count)


def _nodes(prefix: str, spec, quota, count: int) -> None:
    Node.objects.bulk_create(
        Node(name=f"{prefix}-{i}", spec=spec, quota=quota, executor=Executor.SIMULATED) for i in range(count)
    )


def _short(instance_type: str) -> str:
    return instance_type.split(".")[1]


def seed_jobs() -> list[str]:
    """A few jobs on the simulated nodes so a fresh console shows quotas in use, a borrower, pods
    with their own resources sharing a node, a spot bid and a pay-as-you-go job. They go through
    create_job like any other job."""
    from decimal import Decimal as D

    from jobs.services import JobRequest, PodResources, RoleRequest, create_job

    alice, bob = (get_user_model().objects.get(username=n) for n in ("alice", "bob"))
    research, vision = (Workspace.objects.get(name=n) for n in ("ml-research", "vision-lab"))
    quota = {q.name: q.quota_id for q in Quota.objects.all()}
    v100, a10, lingjun = "ecs.gn6v-c8g1.16xlarge", "ecs.gn7i-c8g1.2xlarge", "ml.gu7xf.c96m1600.8-gu108"
    image = "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.3-gpu-py311"
    sim = lambda seconds: {"SIM_DURATION_S": str(seconds)}  # noqa: E731  (simulated nodes hold the pods this long)
    requests = [
        (alice, JobRequest("bert-pretrain", "torchrun train.py", [RoleRequest("Worker", 2, v100, image)],
                           workspace_id=research.pk, quota_id=quota["nlp-team"], envs=sim(4 * 3600), priority=5)),
        (bob, JobRequest("resnet-sweep", "python sweep.py", [RoleRequest("Worker", 1, v100, image)],
                         workspace_id=research.pk, quota_id=quota["nlp-team"], oversold_type="AcceptQuotaOverSold",
                         envs=sim(2 * 3600), ft_enabled=True)),
        (alice, JobRequest("llm-sft-spot", "torchrun sft.py",
                           [RoleRequest("Worker", 1, lingjun, image, spot_strategy="SpotWithPriceLimit",
                                        spot_discount_limit=D("0.5"))],
                           workspace_id=research.pk, resource_type=ResourceType.LINGJUN, source="spot",
                           user_vpc={"VpcId": "vpc-demo", "SwitchId": "vsw-demo", "SecurityGroupId": "sg-demo"},
                           envs=sim(3 * 3600), ft_enabled=True)),
        (bob, JobRequest("eval-a10", "python eval.py", [RoleRequest("Worker", 1, a10, image)],
                         workspace_id=research.pk, source="public", envs=sim(15 * 60))),
        (alice, JobRequest("vit-finetune", "torchrun finetune.py",
                           [RoleRequest("Worker", 2, image=image, resources=PodResources(2, 16, 64 * 1024))],
                           workspace_id=vision.pk, quota_id=quota["cv-team"], envs=sim(3 * 3600))),
    ]
    return [create_job(user, request).job_id for user, request in requests]


# The agents the Procfile starts: this machine as node "local" (public pool) and the simulated agent.
DEMO_AGENTS = ("local", "simulated")


def agent_tokens(directory: Path) -> list[str]:
    """Give each demo agent a join token in <directory>/<name>.token, where the Procfile's agents read
    it; a token already there and still valid is kept. Returns the names issued a new one."""
    from jobs import agents

    directory.mkdir(parents=True, exist_ok=True)
    issued = []
    for name in DEMO_AGENTS:
        path = directory / f"{name}.token"
        credential = AgentCredential.objects.filter(name=name).first()
        if credential is not None and path.exists() and path.read_text().strip() == credential.token:
            continue
        agents.write_token_file(path, agents.register(name))
        issued.append(name)
    return issued
