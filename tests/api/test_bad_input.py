"""Bad input of every class answers a 4xx in the SDK's error shape, and nothing of it is stored:
NUL bytes and unpaired surrogates in a body, path or query, numbers no column holds, JSON nested
without end, a body over the limit, trailing newlines, non-ASCII digits, wrongly typed fields, and
jobs larger than a job may be (issue #27, items 8 and 9). Signed raw requests (tests/api/signed.py)
send what the SDK's models never would."""

import json

import pytest

from jobs.models import Job, Pod
from jobs.services import PODS_MAX, ROLES_MAX
from tests.api.signed import signed

ROLE = {"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge"}
BASE = {"DisplayName": "train", "JobType": "PyTorchJob", "UserCommand": "python train.py", "JobSpecs": [ROLE]}


def refused(response, status=400, code="InvalidParameter", naming=""):
    assert response.status_code == status, response.text
    body = response.json()
    assert body["Code"] == code and naming in body["Message"] and body["RequestId"], body
    return body["Message"]


@pytest.fixture
def create(live_server, alice_key, research):
    def send(body):
        return signed(live_server, alice_key, "POST", "/api/v1/jobs", body=body)
    return send


def role(**fields):
    return {**BASE, "JobSpecs": [{**ROLE, **fields}]}


BAD_BODIES = {
    "a NUL in DisplayName": ({**BASE, "DisplayName": "tr\x00ain"}, "DisplayName"),
    "a NUL in a role's command": (role(UserCommand="python\x00 train.py"), "JobSpecs[0].UserCommand"),
    "a NUL in an Envs value": ({**BASE, "Envs": {"EPOCHS": "3\x00"}}, "Envs.EPOCHS"),
    "an unpaired surrogate": ('{"DisplayName": "\\ud800", "UserCommand": "x"}', "DisplayName"),
    "an Image of 600 characters": (role(Image="pytorch@sha256:" + "a" * 585), "JobSpecs[0].Image"),
    "a trailing newline in an env name": ({**BASE, "Envs": {"EPOCHS\n": "3"}}, "Envs"),
    "a trailing newline in a role name": (role(Type="Worker\n"), "JobSpecs[0].Type"),
    "an object as a role's command": (role(UserCommand={"run": "train"}), "JobSpecs[0].UserCommand"),
    "a VpcId of 200 characters": ({**BASE, "UserVpc": {"VpcId": ["a" * 200]}}, "UserVpc"),
    "a command longer than a pod can run": ({**BASE, "UserCommand": "x" * 40000}, "UserCommand"),
    "too many Envs": ({**BASE, "Envs": {f"V{i}": "1" for i in range(300)}}, "Envs"),
    "a DisplayName of 129 characters (PAI's limit is 128)": ({**BASE, "DisplayName": "n" * 129}, "DisplayName"),
    "an env name of 129 characters": ({**BASE, "Envs": {"A" * 129: "1"}}, "Envs"),
    "too many roles": ({**BASE, "JobSpecs": [{**ROLE, "Type": f"R{i}"} for i in range(ROLES_MAX + 1)]}, "JobSpecs"),
    "too many pods in all": ({**BASE, "JobSpecs": [{**ROLE, "Type": "Worker", "PodCount": PODS_MAX},
                                                   {**ROLE, "Type": "Master", "PodCount": 1}]}, "JobSpecs"),
    "JSON nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "body"),
}


@pytest.mark.parametrize("body,field", BAD_BODIES.values(), ids=BAD_BODIES)
def test_a_bad_create_job_body_is_refused_by_field_and_stores_nothing(create, body, field):
    refused(create(body), naming=field)
    assert not Job.objects.exists() and not Pod.objects.exists()


def test_a_workspace_id_in_other_digits_is_refused(create, research):
    arabic_indic = str(research.pk).translate(str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664"
                                                                         "\u0665\u0666\u0667\u0668\u0669"))
    refused(create({**BASE, "WorkspaceId": arabic_indic}), naming="WorkspaceId")
    assert not Job.objects.exists()


def test_the_same_request_without_the_fault_is_accepted(create):
    assert create(BASE).status_code == 200, "the bodies above differ from an accepted one only by their fault"


def test_a_body_over_the_limit_is_refused_before_its_signature_is_read(live_server, create, settings):
    body = {**BASE, "Description": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    refused(create(body), status=413, code="RequestBodyTooLarge", naming="at most")
    # Unsigned too: a stranger cannot make the server read or hash a large body.
    import requests

    response = requests.post(f"{live_server.url}/api/v1/jobs", data=json.dumps(body),
                             headers={"content-type": "application/json"}, timeout=30)
    refused(response, status=413, code="RequestBodyTooLarge")
    assert not Job.objects.exists()


BAD_READS = {
    "a NUL in the path": ("/api/v1/jobs/dlc\x00abc", {}, "path"),
    "a NUL in a query value": ("/api/v1/jobs", {"DisplayName": "tr\x00ain"}, "DisplayName"),
    "PageNumber 10^19": ("/api/v1/jobs", {"PageNumber": str(10**19)}, "PageNumber"),
    "a PageNumber whose offset no database holds": ("/api/v1/jobs", {"PageNumber": str(2**62)}, "PageNumber"),
    "a non-ASCII PageSize": ("/api/v1/jobs", {"PageSize": "\u0665"}, "PageSize"),
    "PageNumber 10^19 on PaiStudio": ("/api/v1/quotas", {"PageNumber": str(10**19)}, "PageNumber"),
    "a NUL in a PaiStudio query": ("/api/v1/quotas", {"QuotaIds": "a\x00"}, "QuotaIds"),
}


@pytest.mark.parametrize("path,query,field", BAD_READS.values(), ids=BAD_READS)
def test_a_bad_path_or_query_is_refused_by_name(live_server, alice_key, research, path, query, field):
    refused(signed(live_server, alice_key, "GET", path, query=query), naming=field)


def test_an_id_no_column_holds_matches_nothing_rather_than_failing(live_server, alice_key, create):
    create(BASE)
    for workspace in (str(10**19), "\u0661"):
        response = signed(live_server, alice_key, "GET", "/api/v1/jobs", query={"WorkspaceId": workspace})
        assert response.status_code == 200 and response.json()["TotalCount"] == 0, (workspace, response.text)


def test_a_nonce_longer_than_those_kept_is_refused_not_cut(live_server, alice_key, research):
    """Nonces are compared whole: cut to the 128 characters kept, two nonces sharing them were one."""
    for tail in ("a", "b"):
        response = signed(live_server, alice_key, "GET", "/api/v1/jobs",
                          headers={"x-acs-signature-nonce": "n" * 128 + tail})
        refused(response, code="InvalidSignatureNonce", naming="128")
