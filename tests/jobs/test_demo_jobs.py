from decimal import Decimal

from django.utils import timezone

from console import demo
from jobs.models import Job, Pod
from quotas.models import ResourceSpec
from spot.models import PriceHistory


def test_the_demo_jobs_are_valid_and_a_cycle_places_them_in_and_out_of_quota(demo_cluster, sent, cycle):
    lingjun = ResourceSpec.objects.get(instance_type="ml.gu7xf.c96m1600.8-gu108")  # 2.1 a minute
    PriceHistory.objects.create(spec=lingjun, at=timezone.now(), price=Decimal("0.63"))  # below the 50 % bid
    demo.seed_jobs()
    cycle()
    jobs = {job.display_name: job for job in Job.objects.all()}
    assert {name: job.status for name, job in jobs.items()} == dict.fromkeys(
        ["bert-pretrain", "resnet-sweep", "llm-sft-spot", "eval-a10", "vit-finetune"], "EnvPreparing")
    assert jobs["bert-pretrain"].idle_label == "In Quota"
    assert jobs["resnet-sweep"].idle_label == "Not in Quota"  # nlp-team is full: it borrows cv-team's nodes
    # cv-team keeps one node for its own job, whose two 2-GPU pods share it
    assert jobs["vit-finetune"].idle_label == "In Quota"
    vit = list(Pod.objects.filter(job=jobs["vit-finetune"]).select_related("node"))
    assert len({p.node.name for p in vit}) == 1 and sorted(g for p in vit for g in p.gpu_indices) == [0, 1, 2, 3]
    assert Pod.objects.filter(node__isnull=False).count() == 7
    assert len(sent) == 7  # one start message per pod
