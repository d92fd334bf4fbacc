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
        ["bert-pretrain", "resnet-sweep", "llm-sft-spot", "eval-a10"], "EnvPreparing")
    assert jobs["bert-pretrain"].idle_label == "In Quota"
    assert jobs["resnet-sweep"].idle_label == "Not in Quota"  # nlp-team is full: it borrows cv-team's nodes
    assert Pod.objects.filter(node__isnull=False).count() == 5
    assert len(sent) == 5  # one start message per pod
