"""Signature checks over HTTP: what a real SDK client gets back when its request is not acceptable."""

import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_openapi.utils import Utils

from apikit.models import AccessKey, AccessKeyStatus, ApiNonce
from tests.api.conftest import dlc_client
from tests.api.signed import signed_headers


def rejected(call) -> ClientException:
    with pytest.raises(ClientException) as info:
        call()
    return info.value


def list_jobs(client):
    return client.list_jobs(dlc.ListJobsRequest())


def test_a_signed_request_is_accepted_and_marks_the_key_used(alice_dlc, alice_key):
    body = list_jobs(alice_dlc).body
    assert body.total_count == 0 and len(body.request_id) == 36
    assert AccessKey.objects.get(access_key_id=alice_key[0]).last_used_at is not None


def test_a_wrong_secret_is_rejected(endpoint, alice_key):
    error = rejected(lambda: list_jobs(dlc_client(endpoint, alice_key[0], "not-the-secret")))
    assert (error.status_code, error.code) == (400, "SignatureDoesNotMatch")
    assert error.request_id


def test_an_unknown_access_key_is_rejected(endpoint, demo_cluster):
    error = rejected(lambda: list_jobs(dlc_client(endpoint, "LTAInobody", "x")))
    assert (error.status_code, error.code) == (404, "InvalidAccessKeyId.NotFound")


def test_a_disabled_access_key_is_rejected(endpoint, alice_key):
    AccessKey.objects.filter(access_key_id=alice_key[0]).update(status=AccessKeyStatus.DISABLED)
    error = rejected(lambda: list_jobs(dlc_client(endpoint, *alice_key)))
    assert (error.status_code, error.code) == (403, "InvalidAccessKeyId.Inactive")


def test_a_replayed_nonce_is_rejected(alice_dlc, monkeypatch):
    monkeypatch.setattr(Utils, "get_nonce", staticmethod(lambda: "0123456789abcdef0123456789abcdef"))
    list_jobs(alice_dlc)
    error = rejected(lambda: list_jobs(alice_dlc))
    assert (error.status_code, error.code) == (400, "SignatureNonceUsed")


def test_a_stale_date_is_rejected(alice_dlc, monkeypatch):
    stale = (datetime.now(timezone.utc) - timedelta(minutes=16)).strftime("%Y-%m-%dT%H:%M:%SZ")
    monkeypatch.setattr(Utils, "get_timestamp", staticmethod(lambda: stale))
    error = rejected(lambda: list_jobs(alice_dlc))
    assert (error.status_code, error.code) == (400, "InvalidTimeStamp.Expired")


def test_old_nonces_are_pruned(alice_dlc):
    ApiNonce.objects.create(nonce="ancient", seen_at=datetime.now(timezone.utc) - timedelta(hours=1))
    from apikit.auth import DbNonceStore

    DbNonceStore._last_prune = 0.0
    list_jobs(alice_dlc)
    assert not ApiNonce.objects.filter(nonce="ancient").exists()
    assert ApiNonce.objects.count() == 1


def test_an_unsigned_request_gets_a_json_error(live_server, demo_cluster):
    response = requests.get(f"{live_server.url}/api/v1/jobs")
    assert response.status_code == 400
    assert response.json()["Code"] == "MissingAuthorization"
    assert response.json()["RequestId"] == response.headers["x-acs-request-id"]


def test_an_unknown_api_path_gets_a_json_error_not_a_page(live_server, demo_cluster):
    response = requests.get(f"{live_server.url}/api/v1/nothing-here")
    assert (response.status_code, response.json()["Code"]) == (404, "InvalidAction.NotFound")


def test_both_spellings_of_a_path_are_served_without_a_redirect(live_server, demo_cluster):
    for path in ("/api/v1/quotas", "/api/v1/quotas/"):
        response = requests.get(f"{live_server.url}{path}", allow_redirects=False)
        assert response.status_code == 400  # reached the view: unsigned, not redirected


def test_an_action_this_server_does_not_serve_answers_the_sdk_in_json_whatever_its_method(alice_dlc):
    calls = {
        "POST": lambda: alice_dlc.create_tensorboard(dlc.CreateTensorboardRequest(display_name="tb")),
        "PUT": lambda: alice_dlc.update_tensorboard("tb-1", dlc.UpdateTensorboardRequest(max_running_time_minutes=5)),
        "DELETE": lambda: alice_dlc.delete_tensorboard("tb-1", dlc.DeleteTensorboardRequest()),
        "GET": lambda: alice_dlc.get_tensorboard("tb-1", dlc.GetTensorboardRequest()),
    }
    for method, call in calls.items():
        error = rejected(call)
        assert (error.status_code, error.code) == (404, "InvalidAction.NotFound"), method
        assert method in error.message and len(error.request_id) == 36


def test_an_id_with_an_encoded_slash_is_an_entity_that_does_not_exist(alice_dlc):
    for call, entity in [
        (lambda: alice_dlc.get_job("dlc/1", dlc.GetJobRequest()), "Job"),
        (lambda: alice_dlc.stop_job("dlc/1"), "Job"),
        (lambda: alice_dlc.get_pod_logs("dlc1", "pod/0", dlc.GetPodLogsRequest()), "Pod"),
    ]:
        error = rejected(call)
        assert (error.status_code, error.code) == (404, f"EntityNotExist.{entity}")


def test_a_server_that_keeps_the_raw_path_answers_a_real_extra_segment_as_an_unknown_action(client, demo_cluster):
    encoded = client.get("/api/v1/jobs/dlc/1", REQUEST_URI="/api/v1/jobs/dlc%2F1")
    extra = client.get("/api/v1/jobs/dlc/1", REQUEST_URI="/api/v1/jobs/dlc/1")
    assert (encoded.status_code, encoded.json()["Code"]) == (404, "EntityNotExist.Job")
    assert "'dlc/1'" in encoded.json()["Message"]
    assert (extra.status_code, extra.json()["Code"]) == (404, "InvalidAction.NotFound")


def test_a_signed_request_costs_a_key_read_and_a_nonce_insert(client, alice_key, django_assert_num_queries,
                                                                monkeypatch):
    """The floor under every action: the key, the nonce (one statement, no transaction around it),
    and last_used_at only when the key read says it is a minute old."""
    from apikit.auth import DbNonceStore

    monkeypatch.setattr(DbNonceStore, "_last_prune", time.monotonic())  # pruned a moment ago

    def get_missing_job():
        sent = signed_headers(alice_key, "GET", "/api/v1/jobs/dlc-missing", {}, b"", "testserver")
        return client.get("/api/v1/jobs/dlc-missing", headers={k: v for k, v in sent.items() if k != "content-type"},
                          CONTENT_TYPE=sent["content-type"])

    # the key, the nonce, last_used_at, the user's workspaces (jobs.services.visible_to), the job
    with django_assert_num_queries(5):
        assert get_missing_job().json()["Code"] == "EntityNotExist.Job"
    with django_assert_num_queries(4):  # used a moment ago: no update
        assert get_missing_job().json()["Code"] == "EntityNotExist.Job"
    key = AccessKey.objects.filter(access_key_id=alice_key[0])
    key.update(last_used_at=datetime.now(timezone.utc) - timedelta(minutes=2))
    with django_assert_num_queries(5):
        get_missing_job()
    assert key.get().last_used_at > datetime.now(timezone.utc) - timedelta(minutes=1)
