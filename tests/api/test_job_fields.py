"""What CreateJob's fields beside the job's shape do: CustomEnvs (a hidden value is never shown back),
Envs beside them, Accessibility (who sees a PRIVATE job, in the API and the console), user Tags and
ListJobs' Tags filter, ElasticSpec, and ListQuotas' Labels filter. That every field is honoured or
refused is tests/api/test_sdk_fields.py's."""

import json

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_paistudio20220112 import models as studio
from alibabacloud_tea_openapi.exceptions import ClientException

from jobs.models import Job
from jobs.services import CustomEnv, JobRequest, RoleRequest, create_job
from quotas.models import Membership, Quota, Role
from tests.api.conftest import dlc_client, key_of

SECRET = "t0p-s3cret-value"


def create(client, **fields) -> str:
    body = {
        "DisplayName": "train", "JobType": "PyTorchJob", "UserCommand": "python train.py",
        "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge"}],
        **fields,
    }
    return client.create_job(dlc.CreateJobRequest().from_map(body)).body.job_id


def refused(call) -> str:
    with pytest.raises(ClientException) as info:
        call()
    assert info.value.code == "InvalidParameter"
    return info.value.message


# --- CustomEnvs and Envs ------------------------------------------------------------------------

@pytest.fixture
def secret_job(alice_dlc):
    return create(alice_dlc, Envs={"EPOCHS": "3"}, CustomEnvs=[
        {"Key": "TOKEN", "Value": SECRET, "Visible": "false"}, {"Key": "MODE", "Value": "fast", "Visible": "true"}])


def test_get_job_shows_custom_envs_without_the_hidden_values(alice_dlc, secret_job):
    body = alice_dlc.get_job(secret_job, dlc.GetJobRequest()).body
    assert [(e.key, e.value, e.visible) for e in body.custom_envs] == [("TOKEN", None, "false"), ("MODE", "fast", "true")]
    assert body.envs == {"EPOCHS": "3"}
    assert SECRET not in json.dumps(body.to_map())
    listed = alice_dlc.list_jobs(dlc.ListJobsRequest(job_id=secret_job)).body.to_map()
    assert SECRET not in json.dumps(listed)
    assert Job.objects.get(job_id=secret_job).custom_envs[0]["Value"] == SECRET  # the pods get it


def test_the_console_shows_custom_envs_without_the_hidden_values(client, alice, secret_job):
    client.force_login(alice)
    detail = client.get(f"/jobs/{secret_job}/").content.decode()
    assert "TOKEN=" in detail and "MODE=fast" in detail and SECRET not in detail
    clone = client.get("/jobs/create/", {"clone": secret_job}).content.decode()
    assert "TOKEN=" in clone and "MODE=fast" in clone and SECRET not in clone
    admin = client.get(f"/admin/jobs/job/{Job.objects.get(job_id=secret_job).pk}/change/").content.decode()
    assert SECRET not in admin


def test_a_custom_env_name_is_checked_as_envs_names_are(alice_dlc):
    message = refused(lambda: create(alice_dlc, CustomEnvs=[{"Key": "BAD-NAME", "Value": "x"}]))
    assert "CustomEnvs: invalid entries ['BAD-NAME']: names are letters, digits and _" in message
    message = refused(lambda: create(alice_dlc, Envs={"BAD-NAME": "x"}))
    assert "Envs: invalid entries ['BAD-NAME']: names are letters, digits and _" in message


def test_a_custom_env_given_twice_or_with_a_visible_that_is_no_boolean_is_refused(alice_dlc):
    twice = [{"Key": "A", "Value": "1"}, {"Key": "A", "Value": "2"}]
    assert "CustomEnvs: A given more than once" in refused(lambda: create(alice_dlc, CustomEnvs=twice))
    maybe = [{"Key": "A", "Value": "1", "Visible": "maybe"}]
    assert "CustomEnvs[0].Visible: must be true or false" in refused(lambda: create(alice_dlc, CustomEnvs=maybe))


# --- Accessibility ------------------------------------------------------------------------------

@pytest.fixture
def carol(research, django_user_model):
    """A second member of ml-research, beside bob: neither owner nor admin."""
    user = django_user_model.objects.create_user("carol", "carol@example.com", "x")
    Membership.objects.create(workspace=research, user=user, role=Role.MEMBER, is_default=True)
    return user


@pytest.fixture
def private_job(bob_dlc, research):
    return create(bob_dlc, WorkspaceId=str(research.pk), Accessibility="PRIVATE", Description="bob's trial")


def test_a_private_job_is_seen_by_its_owner_and_the_workspaces_owners_not_by_other_members(
        endpoint, alice_dlc, bob_dlc, carol, private_job):
    carol_dlc = dlc_client(endpoint, *key_of(carol))
    for client in (bob_dlc, alice_dlc):  # bob made it, alice owns ml-research
        assert client.get_job(private_job, dlc.GetJobRequest()).body.description == "bob's trial"
        assert private_job in {j.job_id for j in client.list_jobs(dlc.ListJobsRequest()).body.jobs}
    assert private_job not in {j.job_id for j in carol_dlc.list_jobs(dlc.ListJobsRequest()).body.jobs}
    for call in (lambda: carol_dlc.get_job(private_job, dlc.GetJobRequest()),
                 lambda: carol_dlc.get_job_events(private_job, dlc.GetJobEventsRequest()),
                 lambda: carol_dlc.get_pod_logs(private_job, f"{private_job}-worker-0", dlc.GetPodLogsRequest()),
                 lambda: carol_dlc.stop_job(private_job)):
        with pytest.raises(ClientException) as info:
            call()
        assert info.value.code == "EntityNotExist.Job"


def test_a_workspace_admin_sees_a_private_job(bob_admin, alice, research):
    job = create_job(alice, JobRequest(
        display_name="mine", user_command="x", workspace_id=research.pk, source="public", accessibility="PRIVATE",
        roles=[RoleRequest(instance_type="ecs.g7.xlarge", image="python:3.12")]))
    from jobs.services import visible_jobs

    assert visible_jobs(bob_admin).filter(pk=job.pk).exists()


def test_the_console_hides_a_private_job_from_other_members(client, carol, alice, private_job):
    client.force_login(carol)
    assert private_job not in client.get("/jobs/").content.decode()
    assert client.get(f"/jobs/{private_job}/").status_code == 404
    assert "bob&#x27;s trial" not in client.get("/jobs/create/", {"clone": private_job}).content.decode()
    client.force_login(alice)
    assert client.get(f"/jobs/{private_job}/").status_code == 200


def test_accessibility_is_public_or_private(alice_dlc):
    message = refused(lambda: create(alice_dlc, Accessibility="TEAM"))
    assert "Accessibility: must be one of PUBLIC, PRIVATE, got 'TEAM'" in message


# --- Tags ----------------------------------------------------------------------------------------

def test_list_jobs_filters_by_the_users_tags(alice_dlc):
    nlp = create(alice_dlc, Settings={"Tags": {"team": "nlp", "stage": "dev"}})
    create(alice_dlc, Settings={"Tags": {"team": "cv"}})
    untagged = create(alice_dlc)
    found = alice_dlc.list_jobs(dlc.ListJobsRequest(tags={"team": "nlp"})).body.jobs
    assert [j.job_id for j in found] == [nlp]
    assert found[0].settings.tags == {"team": "nlp", "stage": "dev", "acs:pai:dlc:payType": "postpaid"}
    assert untagged in {j.job_id for j in alice_dlc.list_jobs(dlc.ListJobsRequest()).body.jobs}


def test_a_user_tag_may_not_take_the_platforms_prefix(alice_dlc):
    message = refused(lambda: create(alice_dlc, Settings={"Tags": {"acs:owner": "me"}}))
    assert "Settings.Tags: key 'acs:owner': keys starting with 'acs:' are the platform's own" in message


def test_a_job_sent_back_from_get_job_keeps_its_tags_and_the_payment_tag_must_match(alice_dlc, names_of_quotas):
    first = create(alice_dlc, Settings={"Tags": {"team": "nlp"}})
    settings = alice_dlc.get_job(first, dlc.GetJobRequest()).body.settings.to_map()
    again = create(alice_dlc, Settings=settings)
    assert alice_dlc.get_job(again, dlc.GetJobRequest()).body.settings.tags["team"] == "nlp"
    quota_job = dict(ResourceId=names_of_quotas["nlp-team"],
                     JobSpecs=[{"Type": "Worker", "Image": "pytorch:2", "EcsSpec": "ecs.gn6v-c8g1.16xlarge"}])
    message = refused(lambda: create(alice_dlc, Settings=settings, **quota_job))
    assert "Settings.Tags.acs:pai:dlc:payType: is the platform's, set from where the job runs: prepaid" in message


@pytest.fixture
def names_of_quotas(demo_cluster):
    return {q.name: q.quota_id for q in Quota.objects.all()}


# --- ElasticSpec, and fields sent back from GetJob ---------------------------------------------

def elastic_job(names_of_quotas, pods=4, **spec):
    return {"ResourceId": names_of_quotas["nlp-team"],
            "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": pods,
                          "ResourceConfig": {"GPU": "1", "CPU": "4", "Memory": "16Gi"}}],
            "ElasticSpec": {"EnableElasticTraining": True, **spec}}


def test_an_elastic_job_is_stored_with_its_range_and_echoed(alice_dlc, names_of_quotas):
    job_id = create(alice_dlc, **elastic_job(names_of_quotas, MinParallelism=2, MaxParallelism=4))
    assert Job.objects.get(job_id=job_id).elastic_range == (2, 4)
    spec = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.elastic_spec
    assert (spec.enable_elastic_training, spec.min_parallelism, spec.max_parallelism) == (True, 2, 4)
    job_id = create(alice_dlc, ElasticSpec={"EnableElasticTraining": False, "MaxParallelism": 4})
    assert Job.objects.get(job_id=job_id).elastic_range is None


ELASTIC_REFUSALS = [
    ({}, "ElasticSpec.MinParallelism: must be an integer from 1 to 1000 for elastic training, got None"),
    ({"MinParallelism": 0, "MaxParallelism": 4}, "ElasticSpec.MinParallelism: must be an integer from 1"),
    ({"MinParallelism": 3, "MaxParallelism": 2},
     "ElasticSpec.MaxParallelism: must be an integer from MinParallelism (3) to 1000 for elastic training, got 2"),
    ({"MinParallelism": 1, "MaxParallelism": 8},
     "JobSpecs[0].PodCount: is 4; an elastic job's role has MaxParallelism (8) pods"),
]


@pytest.mark.parametrize("spec, message", ELASTIC_REFUSALS)
def test_an_elastic_spec_is_refused_naming_the_field(alice_dlc, names_of_quotas, spec, message):
    assert message in refused(lambda: create(alice_dlc, **elastic_job(names_of_quotas, **spec)))


def test_elastic_training_runs_on_a_quota_only(alice_dlc):
    message = refused(lambda: create(alice_dlc, ElasticSpec={"EnableElasticTraining": True, "MinParallelism": 1,
                                                             "MaxParallelism": 1}))
    assert "ElasticSpec.EnableElasticTraining: elastic training runs on a Resource Quota" in message


def test_a_resource_config_beside_an_ecs_spec_must_be_the_instance_types_own(alice_dlc):
    spec = {"Type": "Worker", "Image": "pytorch:2", "EcsSpec": "ecs.g7.xlarge"}
    echo = {"CPU": "4", "Memory": "16Gi", "GPU": "0", "GPUType": ""}
    assert create(alice_dlc, JobSpecs=[{**spec, "ResourceConfig": echo}])
    message = refused(lambda: create(alice_dlc, JobSpecs=[{**spec, "ResourceConfig": {**echo, "CPU": "2"}}]))
    assert "JobSpecs[0].ResourceConfig: CPU differ from ecs.g7.xlarge's (CPU 4)" in message


def test_use_spot_instance_must_agree_with_the_spot_spec(alice_dlc):
    spec = {"Type": "Worker", "Image": "pytorch:2", "EcsSpec": "ecs.g7.xlarge", "UseSpotInstance": True}
    message = refused(lambda: create(alice_dlc, JobSpecs=[spec]))
    assert "JobSpecs[0].UseSpotInstance: is True but the role has no SpotSpec" in message


# --- quota Labels ---------------------------------------------------------------------------------

def test_list_quotas_filters_by_labels(alice_studio, names_of_quotas):
    def labelled(name, labels):
        return alice_studio.create_quota(studio.CreateQuotaRequest().from_map({
            "QuotaName": name, "ParentQuotaId": names_of_quotas["ml-platform"], "Labels": labels})).body.quota_id

    nlp = labelled("q-nlp", [{"Key": "team", "Value": "nlp"}, {"Key": "tier", "Value": "gold"}])
    labelled("q-cv", [{"Key": "team", "Value": "cv"}])

    def listed(labels):
        return [q.quota_id for q in alice_studio.list_quotas(studio.ListQuotasRequest(labels=labels)).body.quotas]

    assert listed("team=nlp") == [nlp]
    assert listed("team=nlp,tier=gold") == [nlp]
    assert listed("tier") == [nlp]
    assert listed("team=nlp,tier=silver") == []
    alice_studio.update_quota(nlp, studio.UpdateQuotaRequest().from_map({"Labels": [{"Key": "team", "Value": "llm"}]}))
    assert listed("team=nlp") == [] and listed("team=llm") == [nlp]


def test_a_quota_label_key_given_twice_is_refused(alice_studio, names_of_quotas):
    with pytest.raises(ClientException) as info:
        alice_studio.create_quota(studio.CreateQuotaRequest().from_map({
            "QuotaName": "q-twice", "ParentQuotaId": names_of_quotas["ml-platform"],
            "Labels": [{"Key": "team", "Value": "a"}, {"Key": "team", "Value": "b"}]}))
    assert "Labels: [1].Key 'team' is given more than once" in info.value.message
