"""Cordon, uncordon and drain (quotas.services.operate_node): what the schedule cycle, the agents and
AIMaster make of them, and who may do them."""

import pytest

from jobs import dispatch
from jobs.models import Job
from jobs.services import create_job
from quotas import services
from quotas.models import Node
from tests.jobs.conftest import make_request, report

NLP_0, NLP_1 = "nlp-team-gn6v-c8g1-0", "nlp-team-gn6v-c8g1-1"


def nodes_of(job: Job) -> set[str]:
    return {p.node.name for p in job.pods.filter(current=True, node__isnull=False).select_related("node")}


def test_a_cordoned_node_takes_no_new_pods(alice, bob, cycle):
    services.operate_node(alice, NLP_0, "Cordon")
    job = create_job(bob, make_request(pods=1))
    cycle()
    assert nodes_of(job) == {NLP_1}
    second = create_job(bob, make_request(pods=1))
    cycle()
    second.refresh_from_db()
    assert second.status == "Queuing" and not nodes_of(second)


def test_cordoning_keeps_the_pods_of_the_node_running(alice, bob, cycle, sent):
    job = create_job(bob, make_request(pods=2))
    cycle()
    sent.clear()
    services.operate_node(alice, NLP_0, "Cordon")
    assert Node.objects.get(name=NLP_0).cordoned
    assert not sent and not job.pods.filter(terminating=True).exists()


def test_an_uncordoned_node_takes_pods_again(alice, bob, cycle):
    services.operate_node(alice, NLP_0, "Cordon")
    services.operate_node(alice, NLP_1, "Cordon")
    services.operate_node(alice, NLP_0, "Uncordon")
    job = create_job(bob, make_request(pods=1))
    cycle()
    assert nodes_of(job) == {NLP_0}


def test_draining_stops_the_nodes_pods_with_their_grace_period(alice, bob, cycle, sent, django_capture_on_commit_callbacks):
    job = create_job(bob, make_request(pods=2, termination_grace_s=45))
    cycle()
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.operate_node(alice, NLP_0, "Drain")
    pod = job.pods.get(node__name=NLP_0)
    assert [(m.task, m.payload["pod_id"], m.payload["reason"], m.payload["grace_s"]) for m in sent] == [
        (dispatch.STOP_POD, pod.pod_id, "NodeDrained", 45)]
    assert pod.terminating and pod.reason_code == "NodeDrained"
    assert not job.pods.get(node__name=NLP_1).terminating
    assert Node.objects.get(name=NLP_0).cordoned
    assert job.events.filter(reason="NodeDrained", message__contains=pod.pod_id).exists()


def test_a_drained_job_with_fault_tolerance_is_requeued_on_other_nodes(alice, bob, cycle, reports):
    job = create_job(bob, make_request(pods=1, ft_enabled=True))
    cycle()
    drained = job.pods.get(current=True).node.name
    services.operate_node(alice, drained, "Drain")
    pod = job.pods.get(current=True)
    reports(report(pod, "Failed", exit_code=143))
    job.refresh_from_db()
    assert job.status in ("Queuing", "Restarting")
    pod.refresh_from_db()
    assert pod.sub_status == "Evicted"
    cycle()
    job.refresh_from_db()
    assert job.status == "EnvPreparing" and nodes_of(job) and drained not in nodes_of(job)


def test_a_drained_job_without_fault_tolerance_fails(alice, bob, cycle, reports):
    job = create_job(bob, make_request(pods=1))
    cycle()
    services.operate_node(alice, job.pods.get().node.name, "Drain")
    reports(report(job.pods.get(), "Failed", exit_code=143))
    job.refresh_from_db()
    assert job.status == "Failed"


def test_only_an_admin_of_the_nodes_quota_operates_it(bob, charlie, mallory):
    with pytest.raises(services.QuotaForbidden):
        services.operate_node(bob, NLP_0, "Cordon")  # a member, not an admin
    with pytest.raises(services.NodeNotFound):
        services.operate_node(charlie, NLP_0, "Cordon")
    with pytest.raises(services.NodeNotFound):
        services.operate_node(mallory, NLP_0, "Cordon")  # another tenant's node does not exist for her
    assert not Node.objects.get(name=NLP_0).cordoned


def test_a_quota_admin_operates_his_quotas_nodes_but_only_staff_the_public_pool(bob_admin):
    services.operate_node(bob_admin, NLP_0, "Cordon")
    assert Node.objects.get(name=NLP_0).cordoned
    with pytest.raises(services.QuotaForbidden):
        services.operate_node(bob_admin, "pub-g7-0", "Cordon")


def test_an_unknown_operation_is_refused_naming_the_allowed_ones(alice):
    with pytest.raises(services.QuotaRefused) as refused:
        services.operate_node(alice, NLP_0, "Reboot")
    assert refused.value.errors == {"operation": "must be one of Cordon, Uncordon, Drain, got 'Reboot'"}
