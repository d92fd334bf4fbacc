"""The Create Job form: shape checks in the form, domain rules from jobs.services.create_job,
both shown next to the field they concern; HTMX refreshes; Clone."""

import re
from html import unescape

import pytest

from jobs.models import Job
from jobs.services import PodResources
from quotas.models import Quota, Workspace
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


def custom_data(gpu="1", cpu="8", memory_gib="32", **overrides):
    """A quota job whose Worker leaves the specification empty and gives each node's own resources.
    The row is an initial form, as the page renders it: an untouched extra row would be skipped."""
    return form_data(**{"roles-INITIAL_FORMS": "1", "roles-0-spec": "", "roles-0-gpu": gpu, "roles-0-cpu": cpu,
                        "roles-0-memory_gib": memory_gib, **overrides})


def field_error(html: str, field_id: str) -> str:
    match = re.search(rf'id="{field_id}-error"[^>]*>([^<]*)<', html)
    return unescape(match[1]) if match else ""


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


def test_an_image_that_is_not_an_image_reference_is_named_next_to_the_image_field(alice_client):
    response = alice_client.post("/jobs/create/", form_data(image="PyTorch 2.3"))
    assert "is not a valid image reference" in field_error(response.content.decode(), "id_image")
    assert not Job.objects.exists()


def test_a_job_that_could_never_start_is_refused_next_to_its_node_count(alice_client):
    html = unescape(alice_client.post("/jobs/create/", form_data(**{"roles-0-pod_count": "100"})).content.decode())
    assert re.search(r'aria-describedby="id_roles-0-pod_count_error" id="id_roles-0-pod_count"><p class="field-error">'
                     r"the job asks for 100 pods of ecs.gn6v-c8g1.16xlarge, one node each, and quota nlp-team's "
                     r"tree has 4 such nodes: it could never start", html)
    assert not Job.objects.exists()


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


def test_a_quota_job_may_give_each_nodes_gpus_vcpus_and_memory_instead_of_a_specification(alice_client):
    response = alice_client.post("/jobs/create/", custom_data(**{"roles-0-pod_count": "2"}))
    job = Job.objects.get(display_name="bert-pretrain")
    assert response.status_code == 302 and response.url == f"/jobs/{job.job_id}/"
    spec = job.specs.get()
    assert (spec.spec, spec.gpu, spec.cpu, spec.memory_mib) == (None, 1, 8, 32 * 1024)
    assert [(p.gpu, p.cpu_m, p.mem_mib) for p in job.pods.all()] == [(1, 8000, 32 * 1024)] * 2


def test_empty_gpus_mean_a_cpu_only_pod(alice_client):
    alice_client.post("/jobs/create/", custom_data(gpu=""))
    assert Job.objects.get().specs.get().gpu == 0


def test_a_specification_and_the_nodes_resources_together_are_refused_naming_both(alice_client):
    response = alice_client.post("/jobs/create/", custom_data(**{"roles-0-spec": "ecs.gn6v-c8g1.16xlarge"}))
    message = field_error(response.content.decode(), "id_roles-0-spec")
    assert "Resource Specification or GPUs / vCPUs / Memory (GiB), not both" in message
    assert not Job.objects.exists()


def test_neither_a_specification_nor_the_nodes_resources_is_refused_naming_both(alice_client):
    response = alice_client.post("/jobs/create/", custom_data(gpu="", cpu="", memory_gib=""))
    message = field_error(response.content.decode(), "id_roles-0-spec")
    assert "Choose a Resource Specification, or give the GPUs, vCPUs and Memory (GiB)" in message
    assert not Job.objects.exists()


@pytest.mark.parametrize("field, value, expected", [
    ("gpu", "-1", "GPUs must be a whole number from 0 to 1024, got -1."),
    ("gpu", "2000", "GPUs must be a whole number from 0 to 1024, got 2000."),
    ("cpu", "1.5", "vCPUs must be a whole number from 1 to 4096."),
    ("cpu", "", "vCPUs is required when the Resource Specification is empty: a whole number from 1 to 4096."),
    ("memory_gib", "0", "Memory (GiB) must be a whole number from 1 to 65536, got 0."),
    ("memory_gib", "lots", "Memory (GiB) must be a whole number from 1 to 65536."),
])
def test_a_bad_amount_is_named_next_to_its_input(alice_client, field, value, expected):
    response = alice_client.post("/jobs/create/", custom_data(**{field: value}))
    html = response.content.decode()
    assert field_error(html, f"id_roles-0-{field}") == expected
    in_its_cell = rf'name="roles-0-{field}"[^>]*><p class="field-error" id="id_roles-0-{field}-error"'
    assert re.search(in_its_cell, html)
    assert not Job.objects.exists()


def test_a_pod_bigger_than_every_node_of_the_quota_is_refused_in_its_row(alice_client):
    response = alice_client.post("/jobs/create/", custom_data(gpu="16"))  # nlp-team's tree has 8-GPU nodes
    message = field_error(response.content.decode(), "id_roles-0-spec")
    assert "no node of quota nlp-team's tree has room for a pod of 16 GPU / 8 vCPU / 32 GiB" in message
    assert not Job.objects.exists()


def test_a_service_refusal_of_one_amount_lands_next_to_that_input(demo_cluster):
    from console.pages.create import apply_service_errors, bind

    form, roles = bind(custom_data(), Workspace.objects.get(name="ml-research"))
    assert form.is_valid() and roles.is_valid()
    apply_service_errors(form, roles, {"roles[0].resource_config.memory_mib": "must be at most 64 TiB"})
    assert roles.forms[0].errors == {"memory_gib": ["must be at most 64 TiB"]}
    assert not form.errors


def test_public_and_preemptible_jobs_need_a_specification_and_show_no_amounts(alice_client):
    spot = alice_client.get("/jobs/create/", {"_refresh": "1", "source": "spot", "roles-TOTAL_FORMS": "1",
                                              "roles-INITIAL_FORMS": "0"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'name="roles-0-spec"' in spot and 'name="roles-0-gpu"' not in spot and "Memory (GiB)" not in spot
    response = alice_client.post("/jobs/create/", custom_data(source="public", quota=None, oversold_type=None))
    assert field_error(response.content.decode(), "id_roles-0-spec") == "Choose a Resource Specification for the role."
    assert not Job.objects.exists()


def test_clone_prefills_the_nodes_own_resources(alice_client, alice):
    job = quota_job(alice, "cpu-sweep", resources=PodResources(gpu=1, cpu=8, memory_mib=32 * 1024))
    html = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    for name, value in (("gpu", 1), ("cpu", 8), ("memory_gib", 32)):
        assert re.search(rf'name="roles-0-{name}" value="{value}"', html), name
    assert re.search(r'<option value="" selected>Select a specification</option>', html)


def test_clone_rounds_memory_given_in_mib_up_to_whole_gib(alice_client, alice):
    job = quota_job(alice, "small", resources=PodResources(gpu=0, cpu=2, memory_mib=1536))  # API: Memory "1536Mi"
    html = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    assert re.search(r'name="roles-0-memory_gib" value="2"', html)


def test_a_refresh_posts_the_form_so_hidden_variables_stay_out_of_the_url(alice_client):
    html = alice_client.get("/jobs/create/").content.decode()
    assert "_refresh=1" not in html and html.count("""hx-vals='{"_action": "refresh"}'""") == 2
    response = alice_client.post("/jobs/create/", form_data(source="spot", _action="refresh", hidden_envs="TOKEN=s3cret"),
                                 HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="form-body">') and "field-error" not in body


def test_a_job_name_over_128_characters_is_refused_by_the_form(alice_client):
    before = Job.objects.count()
    response = alice_client.post("/jobs/create/", {"display_name": "n" * 129, "source": "quota"})
    assert "Ensure this value has at most 128 characters (it has 129)." in response.content.decode()
    assert Job.objects.count() == before
    assert 'maxlength="128"' in alice_client.get("/jobs/create/").content.decode()


def test_elastic_training_sends_the_elastic_spec_with_the_nodes_as_its_maximum(alice_client):
    response = alice_client.post("/jobs/create/", form_data(**{"elastic_enabled": "on", "elastic_min": "1",
                                                               "roles-0-pod_count": "2"}))
    job = Job.objects.get(display_name="bert-pretrain")
    assert response.status_code == 302
    assert job.elastic_spec == {"EnableElasticTraining": True, "MinParallelism": 1, "MaxParallelism": 2}
    assert job.elastic_range == (1, 2)


def test_an_elastic_minimum_above_the_nodes_is_refused_next_to_it(alice_client):
    response = alice_client.post("/jobs/create/", form_data(**{"elastic_enabled": "on", "elastic_min": "3",
                                                               "roles-0-pod_count": "2"}))
    message = field_error(response.content.decode(), "id_elastic_min")
    assert "MinParallelism (3)" in message and "got 2" in message
    assert not Job.objects.exists()


def test_elastic_training_off_preemptible_resources_is_refused_next_to_its_switch(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{"elastic_enabled": "on", "elastic_min": "1"}))
    assert "Resource Quota" in field_error(response.content.decode(), "id_elastic_enabled")
    assert not Job.objects.exists()


def test_without_elastic_training_the_minimum_is_ignored(alice_client):
    alice_client.post("/jobs/create/", form_data(elastic_min="7"))
    assert Job.objects.get(display_name="bert-pretrain").elastic_spec == {}


def test_turning_on_elastic_training_shows_its_minimum_and_clone_keeps_it(alice_client, alice):
    query = {"_refresh": "1", "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0"}
    off = alice_client.get("/jobs/create/", query, HTTP_HX_REQUEST="true").content.decode()
    on = alice_client.get("/jobs/create/", {**query, "elastic_enabled": "on"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Minimum Workers" not in off and "Minimum Workers" in on

    alice_client.post("/jobs/create/", form_data(**{"elastic_enabled": "on", "elastic_min": "1", "roles-0-pod_count": "2"}))
    job = Job.objects.get(display_name="bert-pretrain")
    html = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    assert re.search(r'name="elastic_enabled"[^>]*checked', html)
    assert re.search(r'name="elastic_min" value="1"', html) and "Minimum Workers" in html


def test_resize_in_place_is_sent_in_the_elastic_spec_and_clone_keeps_it(alice_client):
    alice_client.post("/jobs/create/", form_data(**{"elastic_enabled": "on", "elastic_min": "1",
                                                    "elastic_in_place": "on", "roles-0-pod_count": "2"}))
    job = Job.objects.get(display_name="bert-pretrain")
    assert job.elastic_spec["ResizeInPlace"] is True and job.resizes_in_place
    html = alice_client.get(f"/jobs/create/?clone={job.job_id}").content.decode()
    assert re.search(r'name="elastic_in_place"[^>]*checked', html) and "Resize in Place" in html
