"""ACS3-HMAC-SHA256 verification against requests signed and sent by the real SDK clients.

Pure tests: run with `pytest tests/api -p no:django`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_paistudio20220112 import models as studio
from alibabacloud_tea_openapi.exceptions import ClientException

from apikit import acs3
from tests.api.sdk_capture import (
    AK, SECRET, CapturedRequest, capture_server, dlc_client, json_reply, studio_client,
)

SPOT_JOB = {
    "WorkspaceId": "12",
    "DisplayName": "sample-spot-job é",
    "JobType": "PyTorchJob",
    "JobSpecs": [
        {
            "Type": "Worker",
            "Image": "pytorch-training:1.12-cpu-py39-ubuntu20.04",
            "PodCount": 1,
            "EcsSpec": "ecs.g7.xlarge",
            "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4},
        }
    ],
    "UserCommand": "echo 'Hello World' && sleep 30",
}


ALL = ["create_job", "list_jobs", "get_job", "delete_job", "list_quotas", "price_history"]


def send_sample_requests(server) -> dict[str, CapturedRequest]:
    client, quotas = dlc_client(server.port), studio_client(server.port)
    client.create_job(dlc.CreateJobRequest().from_map(SPOT_JOB))
    client.list_jobs(
        dlc.ListJobsRequest(
            status="Running",
            display_name="a b+c/~*",
            page_size=10,
            from_all_workspaces=True,
            tags={"team": "vision"},
        )
    )
    client.get_job("dlc-odd id+é", dlc.GetJobRequest(need_detail=True))
    client.delete_job("dlc-1")
    quotas.list_quotas(studio.ListQuotasRequest(workspace_ids="1,2", page_number=1))
    quotas.get_spot_price_history("ml.gu7i.c16m60.1-gu30", studio.GetSpotPriceHistoryRequest())
    return dict(zip(ALL, server.requests, strict=True))


@pytest.fixture(scope="module")
def sent() -> dict[str, CapturedRequest]:
    with capture_server() as server:
        return send_sample_requests(server)


def sent_at(req: CapturedRequest) -> datetime:
    return datetime.strptime(req.header_map["x-acs-date"], acs3.DATE_FORMAT).replace(
        tzinfo=timezone.utc
    )


def verify(req: CapturedRequest, *, secrets=None, now=None, nonces=None) -> str:
    secrets = {AK: SECRET} if secrets is None else secrets
    return acs3.verify(
        method=req.method,
        path=req.path,
        query=req.query,
        headers=req.header_map,
        body=req.body,
        secret_for=secrets.get,
        now=now or sent_at(req) + timedelta(seconds=2),
        nonces=nonces or acs3.MemoryNonceStore(),
    )


def rejected(req: CapturedRequest, **kwargs) -> acs3.Acs3Error:
    with pytest.raises(acs3.Acs3Error) as info:
        verify(req, **kwargs)
    return info.value


def with_headers(req: CapturedRequest, **changes) -> CapturedRequest:
    headers = {k: v for k, v in req.header_map.items()}
    for name, value in changes.items():
        name = name.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return dataclasses.replace(req, headers=list(headers.items()))


@pytest.mark.parametrize("name", ALL)
def test_it_accepts_what_the_sdk_signed(sent, name):
    assert verify(sent[name]) == AK


def test_the_sdk_sends_the_shapes_the_verifier_relies_on(sent):
    assert sent["create_job"].method == "POST"
    assert sent["create_job"].header_map["x-acs-content-sha256"] == hashlib.sha256(
        sent["create_job"].body
    ).hexdigest()
    assert sent["list_jobs"].body == b""  # empty body: the hash is sha256(b"")
    assert sent["list_jobs"].header_map["x-acs-content-sha256"] == hashlib.sha256(b"").hexdigest()
    assert sent["get_job"].path == "/api/v1/jobs/dlc-odd%20id%2B%C3%A9"
    assert sent["list_quotas"].path == "/api/v1/quotas/"  # the SDK's own trailing slash
    assert sent["list_jobs"].query["FromAllWorkspaces"] == ["True"]  # Python's str(bool)
    assert sent["list_jobs"].query["Tags"] == ['{"team":"vision"}']  # a JSON string in the query
    assert sent["price_history"].header_map["x-acs-version"] == "2022-01-12"


def test_it_rebuilds_the_sdk_path_from_a_decoded_path(sent):
    req = sent["get_job"]
    decoded = unquote(req.path)
    assert decoded == "/api/v1/jobs/dlc-odd id+é"
    assert acs3.canonical_path(decoded) == req.path
    assert verify(dataclasses.replace(req, raw_target=acs3.canonical_path(decoded) + "?NeedDetail=True")) == AK


def test_it_rejects_a_wrong_secret(sent):
    err = rejected(sent["create_job"], secrets={AK: "not-the-secret"})
    assert (err.code, err.status) == ("SignatureDoesNotMatch", 400)


def test_it_rejects_an_unknown_access_key(sent):
    err = rejected(sent["list_jobs"], secrets={})
    assert (err.code, err.status) == ("InvalidAccessKeyId.NotFound", 404)


def test_it_rejects_a_body_changed_after_signing(sent):
    req = sent["create_job"]
    tampered = dataclasses.replace(req, body=req.body.replace(b"0.4", b"0.9"))
    assert rejected(tampered).code == "ContentSha256Mismatch"


def test_it_rejects_a_body_whose_hash_header_was_changed_too(sent):
    req = sent["create_job"]
    body = req.body.replace(b"0.4", b"0.9")
    tampered = with_headers(
        dataclasses.replace(req, body=body), x_acs_content_sha256=hashlib.sha256(body).hexdigest()
    )
    assert rejected(tampered).code == "SignatureDoesNotMatch"


def test_it_rejects_a_changed_query(sent):
    req = sent["list_jobs"]
    tampered = dataclasses.replace(req, raw_target=req.raw_target.replace("Running", "Failed"))
    assert rejected(tampered).code == "SignatureDoesNotMatch"


def test_it_rejects_a_changed_path(sent):
    req = sent["delete_job"]
    tampered = dataclasses.replace(req, raw_target="/api/v1/jobs/dlc-2")
    assert rejected(tampered).code == "SignatureDoesNotMatch"


def test_it_accepts_a_clock_fourteen_minutes_off(sent):
    req = sent["list_jobs"]
    assert verify(req, now=sent_at(req) + timedelta(minutes=14)) == AK
    assert verify(req, now=sent_at(req) - timedelta(minutes=14)) == AK


@pytest.mark.parametrize("offset", [timedelta(minutes=16), -timedelta(minutes=16)])
def test_it_rejects_a_date_more_than_fifteen_minutes_off(sent, offset):
    req = sent["list_jobs"]
    err = rejected(req, now=sent_at(req) + offset)
    assert (err.code, err.status) == ("InvalidTimeStamp.Expired", 400)


def test_it_rejects_a_request_without_date(sent):
    req = sent["list_jobs"]
    err = rejected(with_headers(req, x_acs_date=None), now=sent_at(req))
    assert err.code == "InvalidTimeStamp.Expired"


def test_it_rejects_a_malformed_date(sent):
    req = sent["list_jobs"]
    http_date = with_headers(req, x_acs_date="Tue, 01 Dec 2026 10:00:00 GMT")
    assert rejected(http_date, now=sent_at(req)).code == "InvalidTimeStamp.Format"


def test_it_rejects_a_replayed_nonce(sent):
    nonces = acs3.MemoryNonceStore()
    req = sent["create_job"]
    assert verify(req, nonces=nonces) == AK
    err = rejected(req, nonces=nonces)
    assert (err.code, err.status) == ("SignatureNonceUsed", 400)


def test_a_forged_request_does_not_burn_the_nonce(sent):
    nonces = acs3.MemoryNonceStore()
    req = sent["create_job"]
    rejected(req, secrets={AK: "wrong"}, nonces=nonces)
    assert verify(req, nonces=nonces) == AK


def test_it_rejects_a_request_without_authorization(sent):
    err = rejected(with_headers(sent["get_job"], authorization=None))
    assert err.code == "MissingAuthorization"


def test_it_rejects_another_signature_algorithm(sent):
    auth = sent["get_job"].header_map["authorization"].replace("ACS3-HMAC-SHA256", "ACS3-HMAC-SM3")
    assert rejected(with_headers(sent["get_job"], authorization=auth)).code == "IncompleteSignature"


def test_it_rejects_a_nonce_left_out_of_the_signed_headers(sent):
    auth = sent["get_job"].header_map["authorization"].replace("x-acs-signature-nonce;", "")
    err = rejected(with_headers(sent["get_job"], authorization=auth))
    assert err.code == "IncompleteSignature"
    assert "x-acs-signature-nonce" in err.message


def test_the_memory_nonce_store_forgets_after_the_window():
    store, t0 = acs3.MemoryNonceStore(), datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert store.seen("n1", t0) is False
    assert store.seen("n1", t0 + timedelta(minutes=29)) is True
    assert store.seen("n1", t0 + timedelta(minutes=61)) is False


def test_the_sdk_raises_our_error_code_and_status():
    """Answering with {Code, Message, RequestId} makes the SDK raise ClientException with them."""
    nonces = acs3.MemoryNonceStore()

    def gatekeeper(req: CapturedRequest):
        try:
            verify(req, now=datetime.now(timezone.utc), nonces=nonces)
        except acs3.Acs3Error as err:
            return json_reply(
                {"RequestId": "req-9", "Code": err.code, "Message": err.message}, err.status
            )
        return json_reply({"RequestId": "req-9", "JobId": "dlc-1"})

    with capture_server() as server:
        server.respond = gatekeeper
        ok = dlc_client(server.port).create_job(dlc.CreateJobRequest().from_map(SPOT_JOB))
        assert ok.body.job_id == "dlc-1"
        with pytest.raises(ClientException) as info:
            dlc_client(server.port, secret="wrong").list_jobs(dlc.ListJobsRequest())
    err = info.value
    assert (err.code, err.status_code, err.request_id) == ("SignatureDoesNotMatch", 400, "req-9")
    assert "Specified signature is not matched" in err.message
