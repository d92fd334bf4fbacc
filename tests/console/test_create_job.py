"""The Create Job form: shape checks in the form, domain rules from jobs.services.create_job,
both shown next to the field they concern; HTMX refreshes; Clone."""

import re

import pytest

from jobs.models import Job
from quotas.models import Quota
from tests.console.conftest import quota_job

pytestmark = pytest.mark.django_db


def form_data(**overrides):
    data = {
        "display_name": "bert-pretrain", "job_type": "PyTorchJob", "image": "pytorch:2.3",
        "user_command": "python train.py", "envs": "EPOCHS=3", "priority": "5", "max_running_time_minutes": "",
        "resource_type": "ECS", "source": "quota", "quota": Quota.objects.get(name="nlp-team").quota_id,
        "oversold_type": "AcceptQuotaOverSold",
        "vpc_id": "", "switch_id": "", "security_group_id": "",
        "ft_run_type": "Synchronous", "ft_max_restarts": "3", "ft_hang_interval_minutes": "30",
        "ft_policy": "ExitCodeAndErrorMsg", "ft_other_config": "",
        "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "0", "roles-MAX_NUM_FORMS": "5",
        "roles-0-role": "Worker", "roles-0-pod_count": "1", "roles-0-spec": "ecs.gn6v-c8g1.16xlarge",
        "roles-0-bid_discount": "",
        "_action": "submit",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def spot_data(**overrides):
    return form_data(**{"source": "spot", "quota": None, "oversold_type": None, "roles-0-spec": "ecs.g7.xlarge",
                        "roles-0-bid_discount": "0.3", **overrides})


def lingjun_spot_data(**overrides):
    return spot_data(**{"resource_type": "Lingjun", "roles-0-spec": "ml.gu7xf.c96m1600.8-gu108", **overrides})


def field_error(html: str, field_id: str) -> str:
    match = re.search(rf'id="{field_id}-error"[^>]*>([^<]*)<', html)
    return match[1] if match else ""


def test_a_valid_quota_job_is_created_and_opens_its_page(alice_client):
    response = alice_client.post("/jobs/create/", form_data())
    job = Job.objects.get(display_name="bert-pretrain")
    assert response.status_code == 302 and response.url == f"/jobs/{job.job_id}/"
    assert (job.status, job.oversold_type, job.priority, job.envs) == ("Queuing", "AcceptQuotaOverSold", 5, {"EPOCHS": "3"})
    assert job.quota.name == "nlp-team"
    assert job.specs.get().image == "pytorch:2.3"


def test_a_tampered_95_percent_bid_is_rejected_naming_the_field(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{"roles-0-bid_discount": "0.95"}))
    assert response.status_code == 200
    message = field_error(response.content.decode(), "id_roles-0-bid_discount")
    assert "Bid Price (Discount)" in message and "0.95" in message
    assert not Job.objects.exists()


def test_a_spot_job_needs_a_bid(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{"roles-0-bid_discount": ""}))
    assert "Choose a Bid Price (Discount)" in field_error(response.content.decode(), "id_roles-0-bid_discount")
    assert not Job.objects.exists()


def test_lingjun_spot_without_a_vpc_shows_the_error_next_to_the_vpc_field(alice_client):
    response = alice_client.post("/jobs/create/", lingjun_spot_data())
    html = response.content.decode()
    vpc_field = re.search(r'<div class="field invalid[^"]*" id="field-vpc_id">.*?</div>', html, re.S)
    assert vpc_field, "the VPC field is not marked invalid"
    assert "required for a spot job on Lingjun" in field_error(html, "id_vpc_id")
    assert field_error(html, "id_switch_id") and field_error(html, "id_security_group_id")
    assert not Job.objects.exists()


def test_lingjun_spot_with_a_vpc_is_created_bidding(alice_client):
    response = alice_client.post("/jobs/create/", lingjun_spot_data(vpc_id="vpc-1", switch_id="vsw-1", security_group_id="sg-1"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.status == "Bidding"
    assert job.user_vpc == {"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"}
    assert str(job.specs.get().spot_discount_limit) == "0.30"


def test_a_quota_of_another_workspace_is_refused(alice_client):
    cv = Quota.objects.get(name="cv-team")  # bound to vision-lab, not ml-research
    response = alice_client.post("/jobs/create/", form_data(quota=cv.quota_id))
    assert "bound to this workspace" in field_error(response.content.decode(), "id_quota")
    assert not Job.objects.exists()


def test_a_lingjun_specification_is_refused_for_a_general_computing_job(alice_client):
    response = alice_client.post("/jobs/create/", form_data(**{"roles-0-spec": "ml.gu7xf.c96m1600.8-gu108"}))
    assert "Resource Specification" in field_error(response.content.decode(), "id_roles-0-spec")


def test_a_malformed_environment_line_is_named(alice_client):
    response = alice_client.post("/jobs/create/", form_data(envs="EPOCHS=3\nnot a variable"))
    assert "Line 2" in field_error(response.content.decode(), "id_envs")


def test_changing_source_to_spot_refreshes_only_the_form_body_without_errors(alice_client):
    response = alice_client.get("/jobs/create/", {"_refresh": "1", "source": "spot", "resource_type": "Lingjun",
                                                  "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0",
                                                  "roles-0-spec": "ml.gu7xf.c96m1600.8-gu108"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="form-body">')
    assert "Bid Price (Discount)" in html and "History Price" in html and "Market price range" in html
    assert "Idle Resources" not in html  # only for Source = Resource Quota
    assert "field-error" not in html


def test_without_javascript_apply_re_renders_the_whole_page(alice_client):
    response = alice_client.post("/jobs/create/", form_data(source="spot", _action="refresh"))
    html = response.content.decode()
    assert "<nav class=\"sidenav\"" in html and "Bid Price (Discount)" in html and "field-error" not in html
    assert not Job.objects.exists()


def test_turning_on_fault_tolerance_shows_its_configuration(alice_client):
    off = alice_client.get("/jobs/create/").content.decode()
    assert "Modify Configuration" not in off
    on = alice_client.get("/jobs/create/", {"_refresh": "1", "ft_enabled": "on", "roles-TOTAL_FORMS": "1",
                                            "roles-INITIAL_FORMS": "0"}, HTTP_HX_REQUEST="true").content.decode()
    for label in ("Modify Configuration", "Run Type", "Maximum Job Restarts", "Hang Detection", "Fault Tolerance Policy", "Other Configuration"):
        assert label in on


def test_add_role_adds_a_row_to_job_resource(alice_client):
    html = alice_client.post("/jobs/create/", form_data(_action="add_role")).content.decode()
    assert 'name="roles-1-spec"' in html


def test_clone_prefills_the_form_from_an_existing_job(alice_client, alice):
    job = quota_job(alice, "resnet", oversold="ForceQuotaOverSold", priority=7)
    html = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    assert 'value="resnet-copy"' in html
    assert re.search(r'value="ForceQuotaOverSold"[^>]*checked', html)
    assert re.search(r'<option value="7" selected>', html)
    assert re.search(r'<option value="ecs.gn6v-c8g1.16xlarge" selected>', html)


def test_the_form_uses_the_console_labels_of_the_pai_documentation(alice_client):
    html = alice_client.get("/jobs/create/").content.decode()
    for label in ("Resource Type", "General Computing", "Lingjun AI Computing Service", "Source", "Resource Quota",
                  "Preemptible Resources", "Public Resources", "Idle Resources", "Not accepted", "Acceptable",
                  "Only Idle Resources", "EasyCkpt", "Job Resource", "Resource Specification", "VPC", "vSwitch",
                  "Security Group", "Fault Tolerance and Diagnosis", "Automatic Fault Tolerance"):
        assert label in html, label
