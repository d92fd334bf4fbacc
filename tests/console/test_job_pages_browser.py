"""The job pages in a real browser: logs that arrive after the page opened, what ran, and
preemptions seen from both sides (tests/console/test_browser.py has the browser and helpers)."""

import re

import pytest

from agent.outbox import Outbox
from agent.simulated import SimulatedExecutor
from cycle import tasks as cycle_tasks
from jobs import dispatch, lifecycle, logs
from jobs.models import Job
from tests.console.conftest import quota_job
from tests.console.test_browser import browser, element_shot, login, page, shot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class SimulatedAgent:
    """A simulated executor whose outbox hands its messages to the platform when the test says,
    in the test's thread: its log chunks to jobs.logs and its reports to jobs.lifecycle, as the
    jobs.pod_logs and jobs.pod_reports tasks do."""

    def __init__(self):
        apply = {"jobs.pod_logs": logs.store_chunks, "jobs.pod_reports": lifecycle.apply_reports}
        self.outbox = Outbox(lambda task, items: apply[task](items), flush_s=3600)
        self.executor = SimulatedExecutor(self.outbox)

    def start(self, messages):
        for message in messages:
            if message.task == dispatch.START_POD:
                self.executor.start(message.payload)
        self.outbox.flush()

    def close(self):
        self.executor.close()
        self.outbox.close()


@pytest.fixture
def agent():
    agent = SimulatedAgent()
    yield agent
    agent.close()


def test_a_job_page_opened_before_its_pod_starts_shows_the_pods_log_lines_as_they_arrive(page, alice, agent,
                                                                                           no_broker):
    job = quota_job(alice, "late-logs")
    login(page, "alice")
    page.goto(f"/jobs/{job.job_id}/")
    logs_card = page.locator("#logs")
    assert "Logs appear once a pod has started." in logs_card.inner_text()
    page.evaluate("window.notReloaded = true")

    cycle_tasks.process_cycle.run()  # admitted; the simulated agent starts the pod and writes its first lines
    agent.start(no_broker)
    logs_card.locator("pre.logs", has_text="running for 60 s").wait_for()
    assert f"simulated pod {job.job_id}-worker-0: no container runs (image pytorch:2)" in logs_card.inner_text()
    assert "$ python train.py" in logs_card.inner_text()
    assert page.evaluate("window.notReloaded === true")
    shot(page, "job-detail-logs-after-start")


def test_the_job_page_shows_what_ran_with_hidden_values_masked(page, alice):
    from datasets.models import Dataset
    from jobs.services import CustomEnv, JobDataSource, JobRequest, RoleRequest, create_job
    from quotas.models import Quota, Workspace

    workspace = Workspace.objects.get(name="ml-research")
    Dataset.objects.create(dataset_id="d-imagenet", workspace=workspace, owner=alice, name="imagenet",
                           uri="oss://datasets/imagenet/", data_source_type="OSS", mount_path="/mnt/data/imagenet",
                           accessibility="PUBLIC")
    job = create_job(alice, JobRequest(
        display_name="resnet-ft", user_command="torchrun --nproc-per-node 8 train.py --data /mnt/data/imagenet",
        workspace_id=workspace.pk, source="quota", quota_id=Quota.objects.get(name="nlp-team").quota_id,
        envs={"EPOCHS": "90"}, custom_envs=[CustomEnv("HF_TOKEN", "hf_s3cr3t", visible=False)],
        data_sources=[JobDataSource("d-imagenet")],
        roles=[RoleRequest(role="Worker", pod_count=1, instance_type="ecs.gn6v-c8g1.16xlarge",
                           image="pytorch:2.3-gpu")],
    ))
    login(page, "alice")
    page.goto(f"/jobs/{job.job_id}/")
    facts = page.locator("#job-live dl.facts")
    fact = lambda name: facts.locator(f"dt:text-is('{name}') + dd").inner_text()
    assert fact("Framework") == "PyTorchJob"
    assert fact("Image") == "pytorch:2.3-gpu"
    assert fact("Startup Command") == "torchrun --nproc-per-node 8 train.py --data /mnt/data/imagenet"
    assert fact("Environment").splitlines() == ["EPOCHS=90", "HF_TOKEN=(hidden)"]
    assert "hf_s3cr3t" not in page.content()
    assert fact("Datasets") == "/mnt/data/imagenet ← oss://datasets/imagenet/ d-imagenet"
    element_shot(page.locator("#job-live section.card").first, "job-detail-what-ran")


def borrow_then_reclaim(alice, bob, *, ft):
    """bob's Only-Idle job runs on cv-team's idle nodes; returns it, and a function that makes
    alice's job on cv-team reclaim them (the pods end as the agents report it)."""
    quota_job(alice, "fill-nlp", pods=2)
    borrower = quota_job(bob, "borrower", pods=2, oversold="ForceQuotaOverSold")
    Job.objects.filter(pk=borrower.pk).update(ft_enabled=ft)
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Running"} for p in borrower.pods.all()])

    def reclaim():
        lender = quota_job(alice, "lender", quota="cv-team", workspace="vision-lab", pods=2)
        cycle_tasks.process_cycle.run()
        lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Failed", "exit_code": 143}
                                 for p in borrower.pods.filter(current=True)])
        return lender

    return borrower, reclaim


def test_a_preempted_job_and_its_preemptor_link_to_each_other_and_the_list_says_preempted(page, alice, bob):
    borrower, reclaim = borrow_then_reclaim(alice, bob, ft=False)
    login(page, "alice")
    page.goto(f"/jobs/{borrower.job_id}/")
    page.evaluate("window.notReloaded = true")
    lender = reclaim()
    page.locator("#job-live dd .badge.s-preempted").wait_for()  # the page updates itself
    assert page.evaluate("window.notReloaded === true")
    preempted = page.locator("ul.events li").filter(has=page.locator("strong", has_text=re.compile("^Preempted$")))
    assert preempted.count() == 1  # one event for the preemption; the job's end is JobFailed
    assert page.locator("ul.events li strong", has_text="JobFailed").count() == 1
    shot(page, "job-detail-preempted-links")

    preempted.get_by_role("link", name=lender.job_id).click()
    page.wait_for_url(f"**/jobs/{lender.job_id}/")
    preempting = page.locator("ul.events li", has_text="Preempting")
    assert f"Preempted job {borrower.job_id} (pods " in preempting.inner_text()
    shot(page, "job-detail-preempting")
    preempting.get_by_role("link", name=borrower.job_id).click()
    page.wait_for_url(f"**/jobs/{borrower.job_id}/")

    page.goto("/jobs/")
    row = page.locator(f"#job-{borrower.job_id}")
    assert row.locator(".badge").first.inner_text() == "Preempted"
    assert row.locator(".badge").first.get_attribute("title").startswith("Failed: Resource Preempted: Reclaimed by")
    shot(page, "jobs-list-preempted")


def test_a_requeued_jobs_page_drops_running_since_and_not_in_quota_as_it_requeues(page, alice, bob):
    borrower, reclaim = borrow_then_reclaim(alice, bob, ft=True)
    login(page, "bob")
    page.goto(f"/jobs/{borrower.job_id}/")
    facts = page.locator("#job-live dl.facts")
    assert "Running since" in facts.inner_text() and "Not in Quota" in facts.inner_text()
    reclaim()  # AIMaster restarts it: its pods end, it waits in the queue again
    page.locator("#job-live dd .badge.s-queuing").wait_for()
    assert "Running since" not in facts.inner_text() and "Not in Quota" not in facts.inner_text()
    assert "RestartPreemption" in page.locator("ul.events").inner_text()
    # The Logs card followed worker-0; it now waits for the pods' next incarnations to start.
    page.locator("#logs", has_text="Logs appear once a pod has started.").wait_for()
    shot(page, "job-detail-requeued")
