"""The DLC 2020-12-03 job actions, driven through the official alibabacloud_pai_dlc20201203 client
against the live server; assertions are on the SDK's own model attributes (filled by from_map)."""

import os
import re
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_tea_openapi.exceptions import ClientException
from django.utils import timezone

from jobs.logs import store_chunks
from jobs.models import Job, Pod, RestartRecord, StatusTransition
from jobs.states import JobStatus, PodStatus, PodSubStatus
from quotas.models import Membership, ResourceSpec, Role
from tests.api.conftest import dlc_client, key_of

SEEDS = Path(__file__).parent / "seed_scripts"


def run_seed(name: str, endpoint, key, workspace, python: str = sys.executable) -> str:
    """Run a seed script as a user would: its own process, credentials in the environment.

    (In-process would not do: alibabacloud_credentials reads the environment once, at import.)
    """
    env = {**os.environ, "ALIBABA_CLOUD_ACCESS_KEY_ID": key[0], "ALIBABA_CLOUD_ACCESS_KEY_SECRET": key[1],
           "OPENDLC_ENDPOINT": endpoint, "OPENDLC_WORKSPACE_ID": str(workspace.pk)}
    done = subprocess.run([python, str(SEEDS / name)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.fullmatch(r"jobId is (dlc\w+)\n", done.stdout)
    assert match, done.stdout
    return match[1]


def create(client, **fields) -> str:
    body = {
        "DisplayName": "train", "JobType": "PyTorchJob", "UserCommand": "python train.py",
        "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge"}],
    }
    body.update(fields)
    return client.create_job(dlc.CreateJobRequest().from_map(body)).body.job_id


def rejected(call) -> ClientException:
    with pytest.raises(ClientException) as info:
        call()
    return info.value


# --- the seed script ------------------------------------------------------------------------------

def test_the_seed_script_creates_a_spot_job_bidding_a_discount(endpoint, alice_key, alice_dlc, research):
    job_id = run_seed("spot_discount_limit.py", endpoint, alice_key, research)

    job = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body
    assert (job.display_name, job.job_type, job.status) == ("sample-spot-job", "PyTorchJob", "Bidding")
    assert job.workspace_id == str(research.pk)
    spec = job.job_specs[0]
    assert (spec.type, spec.pod_count, spec.ecs_spec) == ("Worker", 1, "ecs.g7.xlarge")
    assert spec.spot_spec.spot_strategy == "SpotWithPriceLimit"
    assert spec.spot_spec.spot_discount_limit == 0.4
    assert spec.spot_spec.spot_price_limit is None
    assert job.settings.tags == {"acs:pai:dlc:payType": "spot"}
    assert job.user_vpc.vpc_id == "vpc-0jlq8l7qech3m2ta2****"
    assert job.user_command.startswith("echo 'Hello World'")


def test_the_seed_script_creates_a_spot_job_bidding_a_price(endpoint, alice_key, alice_dlc, research):
    # The seed bids 0.011 per minute on ecs.g7.xlarge; a bid may name at most the on-demand price,
    # and the demo prices that type at 0.0106. Price it like PAI's g7.xlarge so the bid is valid.
    ResourceSpec.objects.filter(instance_type="ecs.g7.xlarge").update(on_demand_price_per_minute=Decimal("0.0165"))

    job_id = run_seed("spot_price_limit.py", endpoint, alice_key, research)

    spot = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.job_specs[0].spot_spec
    assert (spot.spot_price_limit, spot.spot_discount_limit) == (0.011, None)
    assert Job.objects.get(job_id=job_id).specs.get().bid_price == Decimal("0.011000")


def test_a_job_without_workspace_id_lands_in_the_callers_default_workspace(alice_dlc, research):
    job_id = create(alice_dlc)
    assert alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.workspace_id == str(research.pk)


# --- validation -----------------------------------------------------------------------------------

def test_a_refused_bid_is_shown_as_the_user_wrote_it(alice_dlc):
    for field, value in (("SpotDiscountLimit", 0.95), ("SpotPriceLimit", 123.5)):
        error = rejected(lambda: create(alice_dlc, JobSpecs=[{
            "Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge",
            "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", field: value},
        }]))
        assert f"SpotSpec.{field}: must be" in error.message and f"got {value}" in error.message
        assert "Decimal" not in error.message


def test_a_refused_price_limit_names_its_unit_and_shows_the_range_per_hour_as_the_pages_do(alice_dlc):
    error = rejected(lambda: create(alice_dlc, JobSpecs=[{
        "Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge",
        "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": 0.02},
    }]))
    assert "within the market range 0.0990 /h to 0.9900 /h, got 1.2000 /h" in error.message
    assert "SpotPriceLimit is per node-minute, PAI's unit: 0.001650 to 0.016500, got 0.02" in error.message


def test_an_image_that_is_not_a_reference_and_credentials_without_a_password_are_refused_by_name(alice_dlc):
    error = rejected(lambda: create(alice_dlc, JobSpecs=[{
        "Type": "Worker", "Image": "pytorch:2;rm -rf /", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge",
        "ImageConfig": {"DockerRegistry": "reg.example.com", "Username": "robot"},
    }]))
    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert "JobSpecs[0].Image: is not a valid image reference" in error.message
    assert "JobSpecs[0].ImageConfig: give Username and Password together" in error.message
    assert not Job.objects.exists()


def test_validation_errors_name_the_field_and_what_is_allowed(alice_dlc):
    error = rejected(lambda: create(alice_dlc, JobSpecs=[{
        "Type": "Worker", "Image": "pytorch:2", "PodCount": 0, "EcsSpec": "ecs.g7.xlarge",
        "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.45},
    }]))
    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert "JobSpecs[0].SpotSpec.SpotDiscountLimit: must be one of 0.1, 0.2, ... 0.9" in error.message
    assert "JobSpecs[0].PodCount: must be an integer from 1 to 1000" in error.message
    assert {e["Field"] for e in error.data["Errors"]} == {
        "JobSpecs[0].SpotSpec.SpotDiscountLimit", "JobSpecs[0].PodCount"}


@pytest.mark.parametrize("fields, named", [
    ({"JobSpecs": [{"Type": "Worker", "Image": "x", "PodCount": 1, "EcsSpec": "ecs.nope"}]}, "JobSpecs[0].EcsSpec"),
    ({"JobSpecs": []}, "JobSpecs"),
    ({"Priority": 12}, "Priority"),
    ({"WorkspaceId": "999999"}, "WorkspaceId"),
    ({"ResourceId": "quota-none"}, "ResourceId"),
    ({"DisplayName": ""}, "DisplayName"),
])
def test_each_invalid_field_is_named(alice_dlc, fields, named):
    error = rejected(lambda: create(alice_dlc, **fields))
    assert error.code == "InvalidParameter"
    assert error.message.startswith(f"code: 400, {named}: ")


def own_resources(config: dict) -> list[dict]:
    return [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 2, "ResourceConfig": config}]


def test_a_quota_job_may_give_its_pods_own_resources_and_get_job_returns_them(alice_dlc):
    job_id = create(alice_dlc, ResourceId="quota00000002", JobSpecs=own_resources({"GPU": "2", "CPU": "12", "Memory": "48Gi"}))
    spec = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.job_specs[0]
    assert spec.ecs_spec is None and spec.pod_count == 2
    assert (spec.resource_config.gpu, spec.resource_config.cpu, spec.resource_config.memory) == ("2", "12", "48Gi")
    assert [(p.gpu, p.cpu_m, p.mem_mib) for p in Pod.objects.filter(job__job_id=job_id)] == [(2, 12000, 48 * 1024)] * 2


def test_job_specs_from_get_job_can_be_sent_back_to_create_job(alice_dlc):
    """GetJob gives a role of an instance type its ResourceConfig too; CreateJob takes the EcsSpec."""
    first = create(alice_dlc, ResourceId="quota00000002", JobSpecs=[
        {"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.gn6v-c8g1.16xlarge"}])
    specs = [s.to_map() for s in alice_dlc.get_job(first, dlc.GetJobRequest()).body.job_specs]
    assert specs[0]["ResourceConfig"]["GPUType"] == "NVIDIA V100"
    second = create(alice_dlc, ResourceId="quota00000002", JobSpecs=specs)
    again = alice_dlc.get_job(second, dlc.GetJobRequest()).body.job_specs[0]
    assert (again.ecs_spec, again.pod_count, again.resource_config.gpu) == ("ecs.gn6v-c8g1.16xlarge", 1, "8")


@pytest.mark.parametrize("config, named, allowed", [
    ({"GPU": "2", "CPU": "12", "Memory": "48GB"}, "JobSpecs[0].ResourceConfig.Memory", "such as 32Gi or 512Mi"),
    ({"GPU": "2", "CPU": "12"}, "JobSpecs[0].ResourceConfig.Memory", "is required"),
    ({"GPU": "2", "CPU": "12", "Memory": "8Gi", "GPUType": "V100"}, "JobSpecs[0].ResourceConfig.GPUType",
     "give an EcsSpec instead"),
    ({"GPU": "1.5", "CPU": "12", "Memory": "8Gi"}, "JobSpecs[0].ResourceConfig.GPU", "whole number of GPUs"),
    ({"GPU": "16", "CPU": "12", "Memory": "8Gi"}, "JobSpecs[0].ResourceConfig", "no node of quota nlp-team's tree"),
])
def test_bad_resource_config_is_named_and_nothing_is_stored(alice_dlc, config, named, allowed):
    error = rejected(lambda: create(alice_dlc, ResourceId="quota00000002", JobSpecs=own_resources(config)))
    assert error.message.startswith(f"code: 400, {named}: ") and allowed in error.message, error.message
    assert not Job.objects.exists()


def test_resource_config_is_refused_for_public_resources(alice_dlc):
    error = rejected(lambda: create(alice_dlc, JobSpecs=own_resources({"GPU": "1", "CPU": "8", "Memory": "8Gi"})))
    assert error.message.startswith("code: 400, JobSpecs[0].ResourceConfig: ") and "Resource Quota jobs" in error.message


# --- GetJob ---------------------------------------------------------------------------------------

def test_get_job_shows_pods_with_their_evicted_incarnations_history_and_restarts(alice_dlc):
    job_id = create(alice_dlc, ResourceId="quota00000002", Settings={"OversoldType": "AcceptQuotaOverSold"},
                    JobSpecs=[{"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.gn6v-c8g1.16xlarge"}])
    job = Job.objects.get(job_id=job_id)
    now = timezone.now()
    first = job.pods.get()
    Pod.objects.filter(pk=first.pk).update(current=False, status=PodStatus.FAILED, sub_status=PodSubStatus.EVICTED,
                                           pod_id=f"{first.pod_id}-r0")
    Pod.objects.create(pod_id=first.pod_id, job=job, role="Worker", index=0, incarnation=1, status=PodStatus.RUNNING,
                       started_at=now)
    RestartRecord.objects.create(job=job, cause=RestartRecord.Cause.PREEMPTION, at=now - timedelta(seconds=50),
                                 running_again_at=now - timedelta(seconds=8))
    Job.objects.filter(pk=job.pk).update(use_oversold_resource=True, restart_count=1)

    body = alice_dlc.get_job(job_id, dlc.GetJobRequest(need_detail=True)).body

    assert (body.resource_id, body.settings.oversold_type) == ("quota00000002", "AcceptQuotaOverSold")
    assert body.job_specs[0].oversold_type == "AcceptQuotaOverSold"
    pod = body.pods[0]
    assert (pod.pod_id, pod.status, pod.type) == (first.pod_id, "Running", "worker")
    assert [(h.status, h.sub_status) for h in pod.history_pods] == [("Failed", "Evicted")]
    assert [h.status for h in body.status_history] == ["Queuing"]
    assert body.status_history[0].start_time.endswith("Z")
    record = body.restart_record[0]
    assert (record.reason, record.restart_status, record.restart_duration_in_sec) == ("Resource Preempted", "Succeeded", 42)
    assert (body.restart_times, body.request_cpu, body.request_memory) == ("1", 64, 256.0)
    assert body.gmt_create_time.endswith("Z") and "T" in body.gmt_create_time


# --- ListJobs -------------------------------------------------------------------------------------

def test_list_jobs_filters_sorts_and_pages(alice_dlc, research, vision):
    a = create(alice_dlc, DisplayName="resnet-a")
    b = create(alice_dlc, DisplayName="resnet-b", WorkspaceId=str(vision.pk))
    c = create(alice_dlc, DisplayName="bert", ResourceId="quota00000002",
               JobSpecs=[{"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.gn6v-c8g1.16xlarge"}])
    Job.objects.filter(job_id=a).update(status=JobStatus.RUNNING)

    def listed(**query):
        body = alice_dlc.list_jobs(dlc.ListJobsRequest(**query)).body
        return body.total_count, [j.job_id for j in body.jobs]

    assert listed() == (3, [c, b, a])  # newest first
    assert listed(order="asc", sort_by="DisplayName") == (3, [c, a, b])
    assert listed(status="Running") == (1, [a])
    assert listed(display_name="resnet") == (2, [b, a])
    assert listed(workspace_id=str(vision.pk)) == (1, [b])
    assert listed(resource_id="quota00000002") == (1, [c])
    assert listed(payment_type="PrePaid") == (1, [c])
    assert listed(payment_type="PostPaid") == (2, [b, a])
    assert listed(oversold_info="ForbiddenQuotaOverSold") == (1, [c])
    assert listed(page_size=2, page_number=2) == (3, [a])
    item = alice_dlc.list_jobs(dlc.ListJobsRequest(job_id=c)).body.jobs[0]
    assert (item.resource_quota_name, item.username, item.request_memory) == ("nlp-team", "alice", "256Gi")
    assert item.pods[0].status == "Pending"


def test_list_jobs_without_a_time_window_shows_the_last_seven_days(alice_dlc):
    old = create(alice_dlc, DisplayName="old")
    recent = create(alice_dlc, DisplayName="recent")
    Job.objects.filter(job_id=old).update(created_at=timezone.now() - timedelta(days=8))

    default = alice_dlc.list_jobs(dlc.ListJobsRequest()).body
    assert [j.job_id for j in default.jobs] == [recent]
    start = (timezone.now() - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    wide = alice_dlc.list_jobs(dlc.ListJobsRequest(start_time=start)).body
    assert wide.total_count == 2


def test_list_jobs_rejects_an_unknown_filter_value_naming_it(alice_dlc):
    error = rejected(lambda: alice_dlc.list_jobs(dlc.ListJobsRequest(payment_type="Free")))
    assert error.message.startswith("code: 400, PaymentType: must be one of PrePaid, Spot, PostPaid")


# --- StopJob, UpdateJob, DeleteJob ----------------------------------------------------------------

def test_stop_job_stops_a_waiting_job(alice_dlc):
    job_id = create(alice_dlc)
    assert alice_dlc.stop_job(job_id).body.job_id == job_id
    assert alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.status == "Stopped"
    error = rejected(lambda: alice_dlc.update_job(job_id, dlc.UpdateJobRequest(priority=3)))
    assert error.message.startswith(f"code: 400, Priority: job {job_id} already ended (Stopped)")


def test_update_job_changes_the_priority_and_nothing_else(alice_dlc):
    job_id = create(alice_dlc)
    alice_dlc.update_job(job_id, dlc.UpdateJobRequest(priority=7))
    assert alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.priority == 7
    error = rejected(lambda: alice_dlc.update_job(job_id, dlc.UpdateJobRequest(priority=3, user_command="ls")))
    assert "UserCommand: cannot be changed" in error.message


def test_delete_job_removes_a_stopped_job(alice_dlc):
    job_id = create(alice_dlc)
    alice_dlc.stop_job(job_id)
    assert alice_dlc.delete_job(job_id).body.job_id == job_id
    error = rejected(lambda: alice_dlc.get_job(job_id, dlc.GetJobRequest()))
    assert (error.status_code, error.code) == (404, "EntityNotExist.Job")


# --- events and logs ------------------------------------------------------------------------------

def test_get_pod_logs_returns_the_lines_the_agent_shipped(alice_dlc):
    job_id = create(alice_dlc)
    pod = Pod.objects.get(job__job_id=job_id)
    store_chunks([{"pod_id": pod.pod_id, "offset": 0, "text": "Hello World\n"},
                  {"pod_id": pod.pod_id, "offset": 12, "text": "step 1\nDONE\n"}])

    body = alice_dlc.get_pod_logs(job_id, pod.pod_id, dlc.GetPodLogsRequest()).body
    assert (body.job_id, body.pod_id, body.logs) == (job_id, pod.pod_id, ["Hello World", "step 1", "DONE"])
    assert alice_dlc.get_pod_logs(job_id, pod.pod_id, dlc.GetPodLogsRequest(max_lines=1)).body.logs == ["Hello World"]


def test_job_and_pod_events_are_lines_oldest_first(alice_dlc):
    job_id = create(alice_dlc)
    pod = Pod.objects.get(job__job_id=job_id)
    pod.events.create(reason="Scheduled", message="to node pub-g7-0")

    events = alice_dlc.get_job_events(job_id, dlc.GetJobEventsRequest()).body.events
    assert len(events) == 1 and events[0].endswith("Normal JobSubmitted Job submitted; status Queuing")
    pod_events = alice_dlc.get_pod_events(job_id, pod.pod_id, dlc.GetPodEventsRequest()).body
    assert pod_events.events[0].endswith("Normal Scheduled to node pub-g7-0")
    assert StatusTransition.objects.filter(job__job_id=job_id).count() == 1


# --- who sees what --------------------------------------------------------------------------------

def test_bob_cannot_read_or_stop_alices_job_in_a_workspace_he_is_not_in(alice_dlc, bob_dlc, vision):
    job_id = create(alice_dlc, WorkspaceId=str(vision.pk))
    pod_id = Pod.objects.get(job__job_id=job_id).pod_id

    for call in (
        lambda: bob_dlc.get_job(job_id, dlc.GetJobRequest()),
        lambda: bob_dlc.stop_job(job_id),
        lambda: bob_dlc.delete_job(job_id),
        lambda: bob_dlc.get_pod_logs(job_id, pod_id, dlc.GetPodLogsRequest()),
    ):
        error = rejected(call)
        # The same answer as for a job that does not exist: nothing leaks.
        assert (error.status_code, error.code) == (404, "EntityNotExist.Job")
    assert bob_dlc.list_jobs(dlc.ListJobsRequest()).body.total_count == 0
    assert Job.objects.get(job_id=job_id).status == "Queuing"


def test_bob_stops_his_own_job_but_not_a_colleagues(alice_dlc, bob_dlc):
    """PAI's rule: a member changes only the jobs they submitted; owners and admins change any."""
    job_id = create(alice_dlc)  # ml-research, where bob is a member
    assert bob_dlc.get_job(job_id, dlc.GetJobRequest()).body.display_name == "train"
    error = rejected(lambda: bob_dlc.stop_job(job_id))
    assert (error.status_code, error.code) == (403, "NoPermission")
    assert Job.objects.get(job_id=job_id).status != "Stopped"
    own = create(bob_dlc)
    bob_dlc.stop_job(own)
    assert Job.objects.get(job_id=own).status == "Stopped"
    alice_dlc.stop_job(job_id)  # alice owns the workspace
    assert Job.objects.get(job_id=job_id).status == "Stopped"


def test_a_viewer_reads_but_cannot_stop(alice_dlc, endpoint, charlie, research):
    Membership.objects.create(workspace=research, user=charlie, role=Role.VIEWER)
    charlie_dlc = dlc_client(endpoint, *key_of(charlie))
    job_id = create(alice_dlc)

    assert charlie_dlc.get_job(job_id, dlc.GetJobRequest()).body.job_id == job_id
    error = rejected(lambda: charlie_dlc.stop_job(job_id))
    assert (error.status_code, error.code) == (403, "NoPermission")
