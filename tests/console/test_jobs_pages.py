"""The jobs list (columns, filters, paging, polling, no N+1) and the job detail page."""

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cycle import tasks as cycle_tasks
from cycle.estimate import cached_estimates
from jobs import lifecycle
from jobs.models import Job, JobSpec, Pod
from jobs.services import PodResources
from quotas.models import Quota, ResourceSpec, Workspace
from spot.models import DailyBill
from tests.console.conftest import client_for, quota_job

pytestmark = pytest.mark.django_db
POLL = 'hx-trigger="every 2s" data-poll-visible'


def run(job):
    """Admit the job in a schedule cycle and report its pods running, as the agents would."""
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Running"} for p in job.pods.filter(current=True)])
    job.refresh_from_db()
    return job


def bulk_jobs(user, count, pods_per_job):
    workspace = Workspace.objects.get(name="ml-research")
    quota = Quota.objects.get(name="nlp-team")
    spec = ResourceSpec.objects.get(instance_type="ecs.g7.xlarge")
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        Job(job_id=f"dlcbulk{i:06d}", workspace=workspace, user=user, display_name=f"bulk-{i}", user_command="x",
            quota=quota, status="Running" if i % 2 else "Queuing", running_at=now, use_oversold_resource=bool(i % 3))
        for i in range(count)
    )
    JobSpec.objects.bulk_create(JobSpec(job=j, role="Worker", pod_count=pods_per_job, spec=spec, image="img") for j in jobs)
    Pod.objects.bulk_create(
        Pod(pod_id=f"{j.job_id}-w-{n}", job=j, role="Worker", index=n, status="Running") for j in jobs for n in range(pods_per_job)
    )
    DailyBill.objects.bulk_create(
        DailyBill.of(j, spec=spec, day=date(2026, 12, 1), pay_type="spot", minutes=10, amount=Decimal("1.5"),
                     on_demand_amount=Decimal("3")) for j in jobs[:100]
    )


def list_queries(client, **extra):
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/jobs/", **extra)
    assert response.status_code == 200
    return len(queries), response


def test_the_jobs_list_of_1000_jobs_takes_a_constant_number_of_queries(alice_client, alice, django_assert_max_num_queries):
    bulk_jobs(alice, 1000, pods_per_job=1)
    cached_estimates()  # the waiting jobs' estimated starts: once for every page of the next CACHE_S
    # session, user, memberships (switcher, current workspace, admin flag), count, page, specs prefetch
    with django_assert_max_num_queries(12):
        count_one_pod, response = list_queries(alice_client)
    assert response.content.count(b'<tr id="job-') == 50
    Pod.objects.bulk_create(
        Pod(pod_id=f"{job_id}-w-{n}", job_id=pk, role="Worker", index=n, status="Running")
        for pk, job_id in Job.objects.values_list("pk", "job_id") for n in range(1, 6)
    )
    count_six_pods, _ = list_queries(alice_client)
    count_partial, _ = list_queries(alice_client, HTTP_HX_REQUEST="true")
    assert count_six_pods == count_one_pod
    assert count_partial <= count_one_pod


def test_the_list_polls_while_a_job_is_not_final_and_stops_after(alice_client, alice):
    job = quota_job(alice)
    assert POLL in alice_client.get("/jobs/").content.decode()
    Job.objects.filter(pk=job.pk).update(status="Stopped")
    partial = alice_client.get("/jobs/", HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<tbody id="job-rows"')
    assert "hx-trigger" not in partial


def test_a_running_job_is_listed_running_in_quota_with_its_cost(alice_client, alice):
    job = run(quota_job(alice, "bert", oversold="AcceptQuotaOverSold"))
    DailyBill.objects.bulk_create([
        DailyBill.of(job, spec=job.specs.get().spec, day=date.today(), pay_type="postpaid", minutes=3,
                     amount=Decimal("1.25"), on_demand_amount=Decimal("1.25")),
        DailyBill.of(job, spec=job.specs.get().spec, day=date.today() - timedelta(days=1), pay_type="spot",
                     minutes=3, amount=Decimal("2.50"), on_demand_amount=Decimal("5")),
    ])
    row = alice_client.get("/jobs/", HTTP_HX_REQUEST="true").content.decode()
    assert job.status == "Running"
    assert '<span class="badge s-running">Running</span>' in row
    assert '<span class="badge inquota">In Quota</span>' in row
    assert "3.75" in row


def test_a_job_without_bills_costs_zero(alice_client, alice):
    quota_job(alice)
    assert '<td class="num mono">0.00</td>' in alice_client.get("/jobs/").content.decode()


def test_filters_by_status_source_and_name(alice_client, alice):
    quota_job(alice, "alpha")
    beta = quota_job(alice, "beta")
    Job.objects.filter(pk=beta.pk).update(status="Stopped")
    names = lambda **q: alice_client.get("/jobs/", q).content.decode()  # noqa: E731
    assert "alpha" in names(status="Queuing") and "beta" not in names(status="Queuing")
    assert "beta" in names(q="bet") and "alpha" not in names(q="bet")
    assert "alpha" not in names(source="spot")


def test_the_list_pages_by_50(alice_client, alice):
    bulk_jobs(alice, 120, 1)
    html = alice_client.get("/jobs/?page=3").content.decode()
    assert html.count('<tr id="job-') == 20 and "Page 3 of 3" in html


def test_the_detail_page_says_why_a_job_waits_and_its_queue_position(alice_client, alice):
    quota_job(alice, "first", pods=2)  # nlp-team has 2 nodes of 8 GPUs
    waiting = quota_job(alice, "second", pods=2)
    cycle_tasks.process_cycle.run()
    waiting.refresh_from_db()
    html = alice_client.get(f"/jobs/{waiting.job_id}/").content.decode()
    assert "Why is this job waiting?" in html
    assert waiting.wait_reason and waiting.wait_reason.split()[0] in html
    assert f"(queue position {waiting.queue_position})" in html


def test_a_preempted_borrowing_pod_shows_resource_preempted(bob_client, alice, bob):
    # cv-team (vision-lab) is idle: bob's Only-Idle job in nlp-team's tree borrows cv-team's nodes.
    quota_job(alice, "fill-nlp", pods=2)
    borrower = run(quota_job(bob, "borrower", pods=2, oversold="ForceQuotaOverSold"))
    assert borrower.use_oversold_resource is True
    html = bob_client.get(f"/jobs/{borrower.job_id}/").content.decode()
    assert "idle resources" in html and "cv-team-gn6v" not in html  # node names hidden from bob
    quota_job(alice, "lender", quota="cv-team", workspace="vision-lab", pods=2)  # the lender takes its nodes back
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Failed", "exit_code": 143} for p in borrower.pods.filter(current=True)])
    html = bob_client.get(f"/jobs/{borrower.job_id}/").content.decode()
    assert html.count('<span class="badge preempted">Resource Preempted</span>') == 2


def test_staff_see_the_node_name_of_borrowed_idle_pods(alice_client, alice, bob):
    quota_job(alice, "fill-nlp", pods=2)
    borrower = run(quota_job(bob, "borrower", pods=2, oversold="ForceQuotaOverSold"))
    assert "cv-team-gn6v" in alice_client.get(f"/jobs/{borrower.job_id}/").content.decode()


def test_stop_asks_for_post_and_stops_a_queued_job(alice_client, alice):
    job = quota_job(alice)
    assert alice_client.get(f"/jobs/{job.job_id}/stop/").status_code == 405
    response = alice_client.post(f"/jobs/{job.job_id}/stop/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "Stopped"
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "Stopped by alice" in html and ">Stop</button>" not in html and "hx-trigger" not in html


def test_a_member_may_not_stop_a_colleagues_job_in_the_console(bob_client, alice):
    job = quota_job(alice)
    assert ">Stop</button>" not in bob_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert bob_client.post(f"/jobs/{job.job_id}/stop/").status_code == 403
    assert Job.objects.get(pk=job.pk).status == "Queuing"


def test_the_stop_form_carries_a_csrf_token(alice_client, alice):
    job = quota_job(alice)
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert f'action="/jobs/{job.job_id}/stop/"' in html and "csrfmiddlewaretoken" in html


def test_the_detail_shows_the_instance_type_or_the_pods_own_resources(alice_client, alice):
    on_type = quota_job(alice, "on-type")
    custom = run(quota_job(alice, "custom", pods=2, resources=PodResources(gpu=1, cpu=8, memory_mib=32 * 1024)))
    html = alice_client.get(f"/jobs/{on_type.job_id}/").content.decode()
    assert 'Worker × 1 <span class="mono">ecs.gn6v-c8g1.16xlarge</span>' in html
    html = alice_client.get(f"/jobs/{custom.job_id}/").content.decode()
    assert 'Worker × 2 <span class="mono">1 GPU · 8 vCPU · 32 GiB each</span>' in html
    assert custom.status == "Running"
    assert len(re.findall(r"<td>nlp-team-[\w-]+</td>", html)) == 2  # both pods on nodes of the quota


def test_the_detail_shows_history_events_and_the_last_checkpoint(alice_client, alice):
    job = run(quota_job(alice))
    Job.objects.filter(pk=job.pk).update(last_checkpoint_step=1200, last_checkpoint_at=timezone.now())
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "step 1200" in html
    for status in ("Queuing", "EnvPreparing", "Running"):
        assert f'<span class="badge s-{status.lower()}">{status}</span>' in html
    assert "JobAdmitted" in html


def test_a_job_run_without_its_image_says_so_on_its_page(alice_client, alice):
    from quotas.models import Executor, Node

    contained = run(quota_job(alice, "in-a-container"))
    assert "image not used" not in alice_client.get(f"/jobs/{contained.job_id}/").content.decode()
    Node.objects.filter(quota__name="nlp-team").update(executor=Executor.PROCESS)
    job = run(quota_job(alice, "on-the-host"))
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "image not used: process runtime on nlp-team-" in html


def test_the_logs_panel_shows_the_pods_output_and_follows_from_its_offset(alice_client, alice):
    from jobs.logs import store_chunks

    job = run(quota_job(alice))
    pod_id = f"{job.job_id}-worker-0"
    store_chunks([{"pod_id": pod_id, "offset": 0, "text": "epoch 1 loss 0.9\n"}])
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "epoch 1 loss 0.9" in html
    assert f"/jobs/{job.job_id}/logs/?pod={pod_id}&amp;offset=17" in html
    store_chunks([{"pod_id": pod_id, "offset": 17, "text": "epoch 2 loss 0.5\n"}])
    tail = alice_client.get(f"/jobs/{job.job_id}/logs/?pod={pod_id}&offset=17", HTTP_HX_REQUEST="true").content.decode()
    assert "epoch 2 loss 0.5" in tail and "epoch 1" not in tail and "offset=34" in tail and "hx-trigger" in tail
    lifecycle.apply_reports([{"pod_id": pod_id, "status": "Succeeded", "exit_code": 0}])
    done = alice_client.get(f"/jobs/{job.job_id}/logs/?pod={pod_id}&offset=34").content.decode()
    assert "hx-trigger" not in done  # the pod ended: the panel stops following


def test_the_logs_card_of_a_page_opened_before_any_pod_started_polls_until_one_has(alice_client, alice):
    from jobs.logs import store_chunks

    job = quota_job(alice)
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert f'<section class="card" id="logs" hx-get="/jobs/{job.job_id}/logs/" {POLL}' in html
    card = alice_client.get(f"/jobs/{job.job_id}/logs/", HTTP_HX_REQUEST="true").content.decode()
    assert "Logs appear once a pod has started." in card and POLL in card  # still nothing started: asks again

    run(job)
    store_chunks([{"pod_id": f"{job.job_id}-worker-0", "offset": 0, "text": "epoch 1 loss 0.9\n"}])
    card = alice_client.get(f"/jobs/{job.job_id}/logs/", HTTP_HX_REQUEST="true").content.decode()
    assert card.lstrip().startswith('<section class="card" id="logs">')  # the card no longer polls itself...
    assert "epoch 1 loss 0.9" in card and f"?pod={job.job_id}-worker-0&amp;offset=17" in card  # ...its tail does


def test_the_logs_card_of_a_job_that_ended_before_any_pod_started_stops_polling(alice_client, alice):
    job = quota_job(alice)
    assert POLL in alice_client.get(f"/jobs/{job.job_id}/logs/").content.decode()
    alice_client.post(f"/jobs/{job.job_id}/stop/")
    card = alice_client.get(f"/jobs/{job.job_id}/logs/").content.decode()
    assert "Logs appear once a pod has started." in card and "hx-trigger" not in card


def test_the_detail_shows_what_ran_framework_image_command_environment_and_datasets(alice_client, alice):
    from datasets.models import Dataset
    from jobs.services import CustomEnv, JobDataSource, JobRequest, RoleRequest, create_job

    workspace = Workspace.objects.get(name="ml-research")
    Dataset.objects.create(dataset_id="d-mnist", workspace=workspace, owner=alice, name="mnist", uri="file:///data/mnist",
                           data_source_type="FILE", mount_path="/mnt/mnist", accessibility="PUBLIC")
    job = create_job(alice, JobRequest(
        display_name="what-ran", user_command="python train.py --epochs 3", job_type="TFJob", workspace_id=workspace.pk,
        source="quota", quota_id=Quota.objects.get(name="nlp-team").quota_id, envs={"LR": "0.01"},
        custom_envs=[CustomEnv("WANDB_API_KEY", "s3cr3t-token", visible=False), CustomEnv("SEED", "42")],
        data_sources=[JobDataSource("d-mnist")],
        roles=[RoleRequest(role="Worker", pod_count=1, instance_type="ecs.gn6v-c8g1.16xlarge", image="tensorflow:2.15")],
    ))
    html = alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "<dt>Framework</dt><dd>TFJob</dd>" in html
    assert '<span class="mono">tensorflow:2.15</span>' in html
    assert '<pre class="command">python train.py --epochs 3</pre>' in html
    assert "LR=0.01" in html and "SEED=42" in html
    assert 'WANDB_API_KEY=<span class="muted">(hidden)</span>' in html and "s3cr3t-token" not in html
    assert "/mnt/mnist</span> ← file:///data/mnist" in html


def borrowed_then_reclaimed(alice, bob, *, ft=False):
    """bob's job borrows cv-team's idle nodes, runs, and alice's lender job on cv-team reclaims them."""
    quota_job(alice, "fill-nlp", pods=2)
    borrower = run(quota_job(bob, "borrower", pods=2, oversold="ForceQuotaOverSold"))
    Job.objects.filter(pk=borrower.pk).update(ft_enabled=ft)
    lender = quota_job(alice, "lender", quota="cv-team", workspace="vision-lab", pods=2)
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Failed", "exit_code": 143}
                             for p in borrower.pods.filter(current=True)])
    borrower.refresh_from_db()
    return borrower, lender


def test_the_preempted_job_and_the_job_that_preempted_it_link_to_each_other(alice_client, alice, bob):
    borrower, lender = borrowed_then_reclaimed(alice, bob)
    victim_page = alice_client.get(f"/jobs/{borrower.job_id}/").content.decode()
    to_lender = f'job <a href="/jobs/{lender.job_id}/">{lender.job_id}</a>'
    assert victim_page.count(to_lender) >= 4  # the reason, the Preempted event, the history, each pod
    lender_page = alice_client.get(f"/jobs/{lender.job_id}/").content.decode()
    assert f'<strong>Preempting</strong> Preempted job <a href="/jobs/{borrower.job_id}/">{borrower.job_id}</a> (pods ' in lender_page
    bob_page = client_for(Client(), bob).get(f"/jobs/{borrower.job_id}/").content.decode()
    assert f"for job {lender.job_id}" in bob_page  # bob is no member of vision-lab: the lender is named, not linked
    assert f'href="/jobs/{lender.job_id}/"' not in bob_page


def test_a_job_failed_by_preemption_is_listed_preempted_and_the_api_still_says_failed(bob_client, alice, bob):
    borrower, _ = borrowed_then_reclaimed(alice, bob)
    row = re.search(rf'<tr id="job-{borrower.job_id}">.*?</tr>', bob_client.get("/jobs/").content.decode(), re.DOTALL)[0]
    assert '<span class="badge s-preempted" title="Failed: Resource Preempted: Reclaimed by quota cv-team' in row
    assert ">Preempted</span>" in row and ">Failed</span>" not in row
    assert (borrower.status, borrower.reason_code) == ("Failed", "Preempted")
    html = bob_client.get(f"/jobs/{borrower.job_id}/").content.decode()
    assert '<span class="badge s-preempted">Preempted</span> <span class="muted">status Failed, reason Preempted</span>' in html


def test_a_requeued_job_shows_neither_running_since_nor_not_in_quota(bob_client, alice, bob):
    borrower, _ = borrowed_then_reclaimed(alice, bob, ft=True)  # AIMaster restarts it: back to the queue
    assert borrower.status == "Queuing" and borrower.use_oversold_resource is True and borrower.running_at
    html = bob_client.get(f"/jobs/{borrower.job_id}/").content.decode()
    assert "Running since" not in html and "Not in Quota</span>" not in html
    row = re.search(rf'<tr id="job-{borrower.job_id}">.*?</tr>', bob_client.get("/jobs/").content.decode(), re.DOTALL)[0]
    assert "Not in Quota" not in row


def test_the_logs_card_moves_on_to_the_next_incarnation_when_the_job_restarts(bob_client, alice, bob):
    from jobs.logs import store_chunks

    borrower, _ = borrowed_then_reclaimed(alice, bob, ft=True)  # pod worker-0 ran, then the job was re-queued
    old = f"{borrower.job_id}-worker-0"
    asked = bob_client.get(f"/jobs/{borrower.job_id}/logs/?pod={old}&offset=0&auto=1", HTTP_HX_REQUEST="true")
    assert (asked["HX-Retarget"], asked["HX-Reswap"]) == ("#logs", "outerHTML")
    assert "Logs appear once a pod has started." in asked.content.decode() and POLL in asked.content.decode()
    pinned = bob_client.get(f"/jobs/{borrower.job_id}/logs/?pod={old}&offset=0", HTTP_HX_REQUEST="true")
    assert "HX-Retarget" not in pinned and "hx-trigger" not in pinned.content.decode()  # a pod the user chose stays

    Pod.objects.filter(pod_id=f"{old}-1").update(status="Running", started_at=timezone.now())  # its next incarnation
    store_chunks([{"pod_id": f"{old}-1", "offset": 0, "text": "resumed from step 300\n"}])
    card = bob_client.get(f"/jobs/{borrower.job_id}/logs/", HTTP_HX_REQUEST="true").content.decode()
    assert f'<span class="mono muted">{old}-1</span>' in card and "resumed from step 300" in card


def test_the_logs_panel_stops_waiting_for_output_once_the_pod_ended_without_any(alice_client, alice):
    job = run(quota_job(alice))
    pod_id = f"{job.job_id}-worker-0"
    assert "Waiting for log output…" in alice_client.get(f"/jobs/{job.job_id}/").content.decode()
    lifecycle.apply_reports([{"pod_id": pod_id, "status": "Succeeded", "exit_code": 0}])
    tail = alice_client.get(f"/jobs/{job.job_id}/logs/?pod={pod_id}&offset=0", HTTP_HX_REQUEST="true").content.decode()
    assert "No log output." in tail and "Waiting" not in tail  # the tail replaces the placeholder it carries
