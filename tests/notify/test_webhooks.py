"""Webhooks: a workspace's subscription gets a signed JSON body for the job events it chose, retried
with backoff on transient errors; loopback URLs are refused unless an admin allows them."""

import socket
import time

import pytest
from django.core.exceptions import PermissionDenied

from jobs.states import JobStatus
from notify import addresses, services, signing
from notify.models import Delivery, DeliveryStatus
from quotas.models import Workspace
from tests.notify.conftest import move, run

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(demo_cluster):
    return Workspace.objects.get(name="ml-research")


@pytest.fixture
def allow_private(settings):
    """The admin override: the test receiver listens on loopback."""
    settings.OPENDLC_WEBHOOK_ALLOW_PRIVATE = True


def subscribe(alice, research, receiver, events=("Running", "Succeeded", "Failed")):
    return services.create_subscription(alice, research, channel="webhook", target=receiver.url, chosen=list(events))


def test_the_receiver_gets_a_signed_body_that_verifies(alice, research, job, receiver, allow_private, eager_celery,
                                                        django_capture_on_commit_callbacks):
    subscription, secret = subscribe(alice, research, receiver)
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    (got,) = receiver.received
    assert signing.verify(secret, got.body, got.headers["OpenDLC-Signature"], now=int(time.time()))
    assert got.json["event"] == "Running" and got.headers["OpenDLC-Event"] == "Running"
    assert got.json["job"]["job_id"] == job.job_id and got.json["job"]["display_name"] == "bert-finetune"
    assert got.json["workspace"]["name"] == "ml-research"
    assert secret.startswith("whsec_") and secret not in subscription.secret_encrypted
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.SUCCEEDED, 1, 200)
    assert got.headers["OpenDLC-Delivery"] == delivery.uid == got.json["id"]


def test_a_body_changed_in_transit_does_not_verify(alice, research, job, receiver, allow_private, eager_celery,
                                                   django_capture_on_commit_callbacks):
    _, secret = subscribe(alice, research, receiver)
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    (got,) = receiver.received
    tampered = got.body.replace("Running", "Succeeded")
    assert not signing.verify(secret, tampered, got.headers["OpenDLC-Signature"], now=int(time.time()))
    assert not signing.verify(secret, got.body, got.headers["OpenDLC-Signature"], now=int(time.time()) + 3600)


def test_a_500_is_retried_until_the_receiver_takes_it(alice, research, job, receiver, allow_private, eager_celery,
                                                      django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver)
    receiver.codes = [500, 503]
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    assert len(receiver.received) == 3
    assert len({r.headers["OpenDLC-Delivery"] for r in receiver.received}) == 1  # one delivery, three attempts
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.SUCCEEDED, 3, 200)


def test_a_delivery_gives_up_after_the_most_attempts(alice, research, job, receiver, allow_private, eager_celery,
                                                     settings, django_capture_on_commit_callbacks):
    settings.OPENDLC_WEBHOOK_MAX_ATTEMPTS = 3
    subscribe(alice, research, receiver)
    receiver.codes = [500] * 10
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    delivery = Delivery.objects.get()
    assert len(receiver.received) == 3
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.FAILED, 3, 500)
    assert "HTTP 500" in delivery.last_error


def test_a_404_is_not_retried(alice, research, job, receiver, allow_private, eager_celery,
                              django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver)
    receiver.codes = [404]
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    delivery = Delivery.objects.get()
    assert len(receiver.received) == 1 and (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)


def test_a_redirect_is_not_followed(alice, research, job, receiver, allow_private, eager_celery,
                                    django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver)
    receiver.codes = [302]
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    delivery = Delivery.objects.get()
    assert len(receiver.received) == 1 and delivery.status == DeliveryStatus.FAILED
    assert "not followed" in delivery.last_error


def test_only_the_events_a_subscription_chose_are_sent(alice, research, job, receiver, allow_private, eager_celery,
                                                       django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver, events=["Succeeded"])
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
        move(job, JobStatus.SUCCEEDED)
    assert [r.json["event"] for r in receiver.received] == ["Succeeded"]


def test_a_preempted_job_that_fails_is_a_preempted_event_and_a_failed_one(alice, research, job, receiver,
                                                                         allow_private, eager_celery,
                                                                         django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver, events=["Failed", "Preempted"])
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
        move(job, JobStatus.FAILED, reason="Preempted")
    (got,) = receiver.received
    assert got.json["event"] == "Preempted" and got.json["events"] == ["Preempted", "Failed"]


def test_a_rolled_back_change_sends_nothing(alice, research, job, receiver, allow_private, eager_celery,
                                            django_capture_on_commit_callbacks):
    subscribe(alice, research, receiver)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        try:
            from django.db import transaction
            with transaction.atomic():
                run(job)
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert callbacks == [] and receiver.received == [] and not Delivery.objects.exists()


def test_another_workspaces_subscription_hears_nothing(alice, job, receiver, allow_private, eager_celery,
                                                       django_capture_on_commit_callbacks):
    vision = Workspace.objects.get(name="vision-lab")
    subscribe(alice, vision, receiver)
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    assert receiver.received == []


# ---- where a webhook may point -----------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/hook", "http://localhost/hook", "http://[::1]/hook",
                                 "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0/hook",
                                 "http://[::ffff:127.0.0.1]/hook"])
def test_a_url_at_loopback_link_local_or_this_server_is_refused(alice, research, url):
    with pytest.raises(services.NotifyRefused) as refused:
        services.create_subscription(alice, research, channel="webhook", target=url, chosen=["Failed"])
    assert "url" in refused.value.errors


@pytest.mark.parametrize("url", ["http://dlc.example.com/hook", "https://alias.example.net/hook"])
def test_a_url_at_this_servers_own_name_or_address_is_refused(alice, research, settings, monkeypatch, url):
    settings.ALLOWED_HOSTS = ["dlc.example.com"]
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 80))]
    real = socket.getaddrinfo
    monkeypatch.setattr(addresses.socket, "getaddrinfo", lambda host, *a, **kw: public if host in (
        "dlc.example.com", "alias.example.net") else real(host, *a, **kw))
    with pytest.raises(services.NotifyRefused) as refused:
        services.create_subscription(alice, research, channel="webhook", target=url, chosen=["Failed"])
    assert "this server" in refused.value.errors["url"]


def test_the_admin_setting_allows_a_loopback_url(alice, research, receiver, allow_private):
    subscription, _ = subscribe(alice, research, receiver)
    assert subscription.url == receiver.url


def test_only_staff_may_allow_private_addresses_on_one_subscription(alice, bob_admin, research, receiver):
    with pytest.raises(PermissionDenied):
        services.create_subscription(bob_admin, research, channel="webhook", target=receiver.url,
                                     chosen=["Failed"], allow_private=True)
    assert alice.is_staff
    subscription, _ = services.create_subscription(alice, research, channel="webhook", target=receiver.url,
                                                   chosen=["Failed"], allow_private=True)
    assert subscription.allow_private


def test_a_name_that_resolves_to_loopback_by_delivery_time_is_refused_then(alice, research, job, receiver,
                                                                          monkeypatch, eager_celery,
                                                                          django_capture_on_commit_callbacks):
    real = socket.getaddrinfo
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 80))]
    monkeypatch.setattr(addresses.socket, "getaddrinfo",
                        lambda host, *a, **kw: public if host == "hooks.example.com" else real(host, *a, **kw))
    services.create_subscription(alice, research, channel="webhook", target="http://hooks.example.com/x",
                                 chosen=["Running"])
    rebound = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))]
    monkeypatch.setattr(addresses.socket, "getaddrinfo",
                        lambda host, *a, **kw: rebound if host == "hooks.example.com" else real(host, *a, **kw))
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "resolves to 127.0.0.1, a loopback address" in delivery.last_error


def test_a_delivery_connects_to_the_address_it_checked(alice, research, job, receiver, allow_private, monkeypatch,
                                                       eager_celery, django_capture_on_commit_callbacks):
    """The name is resolved once, checked, and that address is called with the name in Host."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = [[(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]]
    real = socket.getaddrinfo
    monkeypatch.setattr(addresses.socket, "getaddrinfo",
                        lambda host, *a, **kw: answers[0] if host == "hooks.example.com" else real(host, *a, **kw))
    services.create_subscription(alice, research, channel="webhook", target=f"http://hooks.example.com:{port}/x",
                                 chosen=["Running"])
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    (got,) = receiver.received
    assert got.headers["Host"] == f"hooks.example.com:{port}"


def test_bad_input_names_the_field(alice, research):
    with pytest.raises(services.NotifyRefused) as refused:
        services.create_subscription(alice, research, channel="webhook", target="ftp://example.com/x",
                                     chosen=["Exploded"])
    assert set(refused.value.errors) == {"url", "events"}
    assert "Running" in refused.value.errors["events"] and "http" in refused.value.errors["url"]


def tls_receiver(name: str):
    """An HTTPS receiver on loopback whose self-signed certificate names `name`; (server, its
    certificate file, the server names clients sent (SNI))."""
    import datetime
    import ssl
    import tempfile
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tempfile.mkdtemp()
    cert_file, key_file = f"{folder}/cert.pem", f"{folder}/key.pem"
    with open(cert_file, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_file, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server, names = ThreadingHTTPServer(("127.0.0.1", 0), Handler), []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    context.sni_callback = lambda sock, server_name, ctx: names.append(server_name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, cert_file, names


@pytest.mark.parametrize(("certificate_for", "delivered"), [("hooks.example.com", True), ("other.example.com", False)])
def test_an_https_webhook_sent_to_the_checked_address_still_checks_the_certificate_against_its_host(
        alice, research, job, allow_private, monkeypatch, eager_celery, django_capture_on_commit_callbacks,
        certificate_for, delivered):
    import requests

    server, cert_file, names = tls_receiver(certificate_for)
    real_getaddrinfo, real_post = socket.getaddrinfo, requests.Session.post
    loopback = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", server.server_port))]
    monkeypatch.setattr(addresses.socket, "getaddrinfo",
                        lambda host, *a, **kw: loopback if host == "hooks.example.com" else real_getaddrinfo(host, *a, **kw))
    # The receiver's self-signed certificate is the only one trusted (the sender trusts certifi's).
    monkeypatch.setattr(requests.Session, "post", lambda self, *a, **kw: real_post(self, *a, verify=cert_file, **kw))
    services.create_subscription(alice, research, channel="webhook", chosen=["Running"],
                                 target=f"https://hooks.example.com:{server.server_port}/x")
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
    server.shutdown()
    delivery = Delivery.objects.get()
    assert names and set(names) == {"hooks.example.com"}  # SNI names the host, not the address
    assert (delivery.status == DeliveryStatus.SUCCEEDED) == delivered
    assert delivered or "hooks.example.com" in delivery.last_error
