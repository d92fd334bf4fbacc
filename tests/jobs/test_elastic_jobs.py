"""Elastic jobs through the real cycle and pod reports (jobs/elastic.py, cycle/resize.py): a
reclaim shrinks the borrower, which restarts smaller without a restart counted, and grows back."""

from jobs.models import Job, JobEvent, Pod
from jobs.services import create_job
from quotas.models import Workspace
from tests.jobs.conftest import CV, make_request, report

ELASTIC = {"EnableElasticTraining": True, "MinParallelism": 1, "MaxParallelism": 2}


def starts(sent, job):
    return {m.payload["pod_id"]: m.payload["env"] for m in sent
            if m.task == "agent.start_pods" and m.payload["job_id"] == job.job_id}


def stops(sent):
    return sorted((m.payload["pod_id"], m.payload["reason"]) for m in sent if m.task == "agent.stop_pods")


def current(job):
    return list(Pod.objects.filter(job=job, current=True).select_related("node").order_by("index"))


def running_borrower(bob, cycle, reports, sent, spec=ELASTIC):
    """bob's nlp-team is full; his elastic job borrows both of cv-team's nodes and runs."""
    create_job(bob, make_request(pods=2))
    cycle()
    job = create_job(bob, make_request(pods=2, oversold_type="ForceQuotaOverSold", elastic_spec=spec))
    sent.clear()
    cycle()
    reports(*[report(p, "Running") for p in current(job)])
    return job


def reclaim_one_node(alice, cycle, sent):
    vision = Workspace.objects.get(name="vision-lab")
    lender = create_job(alice, make_request(pods=1, workspace_id=vision.pk, quota_id=CV))
    sent.clear()
    cycle()
    return lender


def test_an_elastic_job_starts_at_its_widest_with_torchrun_s_elastic_environment(bob, cycle, reports, sent):
    job = running_borrower(bob, cycle, reports, sent)
    envs = list(starts(sent, job).values())
    assert [(e["RANK"], e["WORLD_SIZE"], e["PET_NNODES"]) for e in envs] == [("0", "2", "2:2"), ("1", "2", "2:2")]
    assert envs[1]["PET_RDZV_ENDPOINT"] == f"{envs[0]['MASTER_ADDR']}:{envs[0]['MASTER_PORT']}"
    assert "OPENDLC_MEMBERSHIP_FILE" not in envs[0]  # it restarts when resized: nothing to tell it
    assert Job.objects.get(pk=job.pk).status == "Running"


def test_a_reclaim_shrinks_the_borrower_which_restarts_smaller_without_counting_a_restart(
        alice, bob, cycle, reports, sent):
    job = running_borrower(bob, cycle, reports, sent)
    lender = reclaim_one_node(alice, cycle, sent)
    first, second = current(job)
    assert stops(sent) == [(first.pod_id, "Resize"), (second.pod_id, "Shrunk")]
    message = f"Shrunk from 2 to 1 workers: reclaimed by quota cv-team for job {lender.job_id}"
    assert JobEvent.objects.get(job=job, reason="ElasticResize").message == message

    sent.clear()
    reports(report(first, "Failed", exit_code=143, reason="Resize"))
    assert starts(sent, job) == {}  # the worker taken away is still stopping
    reports(report(second, "Failed", exit_code=143, reason="Shrunk"))
    (env,) = starts(sent, job).values()
    assert (env["RANK"], env["WORLD_SIZE"]) == ("0", "1")
    job.refresh_from_db()
    assert (job.status, job.restart_count) == ("Running", 0)
    assert Pod.objects.get(pk=second.pk).status_label == "Resource Preempted"
    kept, spare = current(job)
    assert (kept.incarnation, kept.node_id, spare.node_id) == (1, first.node_id, None)


def test_the_shrunk_job_grows_back_once_the_lender_is_done(alice, bob, cycle, reports, sent):
    job = running_borrower(bob, cycle, reports, sent)
    lender = reclaim_one_node(alice, cycle, sent)
    reports(*[report(p, "Failed", exit_code=143) for p in current(job)])
    reports(*[report(p, "Running") for p in current(job) if p.node_id])
    cycle()
    (lender_pod,) = lender.pods.all()
    reports(report(lender_pod, "Running"))
    sent.clear()
    cycle()
    assert stops(sent) == []  # the lender still holds its node: nothing to grow into

    reports(report(lender_pod, "Succeeded", exit_code=0))
    cycle()
    kept, grown = current(job)
    assert grown.node_id is not None and stops(sent) == [(kept.pod_id, "Resize")]
    assert JobEvent.objects.filter(job=job, reason="ElasticResize").last().message == (
        "Grew from 1 to 2 workers: idle capacity is free")
    sent.clear()
    reports(report(kept, "Failed", exit_code=143, reason="Resize"))
    assert sorted((e["RANK"], e["WORLD_SIZE"]) for e in starts(sent, job).values()) == [("0", "2"), ("1", "2")]
    assert Job.objects.get(pk=job.pk).restart_count == 0


def test_an_elastic_job_ends_whole_when_a_reclaim_takes_a_worker_within_its_minimum(
        alice, bob, cycle, reports, sent):
    create_job(bob, make_request(pods=2))
    spec = {**ELASTIC, "MinParallelism": 2}
    job = create_job(bob, make_request(pods=2, oversold_type="ForceQuotaOverSold", elastic_spec=spec))
    cycle()
    reports(*[report(p, "Running") for p in current(job)])
    reclaim_one_node(alice, cycle, sent)
    assert [reason for _, reason in stops(sent)] == ["Preempted"]
    assert not JobEvent.objects.filter(job=job, reason="ElasticResize").exists()


def test_the_job_page_and_get_job_show_its_workers_now_its_range_and_each_resize(
        alice, bob, cycle, reports, sent, client):
    from api.job_shapes import job_detail, job_item, with_shape_data

    job = running_borrower(bob, cycle, reports, sent)
    lender = reclaim_one_node(alice, cycle, sent)
    reports(*[report(p, "Failed", exit_code=143) for p in current(job)])
    body = job_detail(with_shape_data(Job.objects, detail=True).get(pk=job.pk))
    assert body["ElasticWorkers"] == {"Current": 1, "MinParallelism": 1, "MaxParallelism": 2}
    assert job_item(with_shape_data(Job.objects, detail=False).get(pk=job.pk))["ElasticWorkers"]["Current"] == 1
    (resize,) = body["ElasticResizes"]
    assert resize["Message"] == f"Shrunk from 2 to 1 workers: reclaimed by quota cv-team for job {lender.job_id}"

    client.force_login(bob)
    page = client.get(f"/jobs/{job.job_id}/").content.decode()
    assert '<dt>Elastic workers</dt><dd><span class="mono">1</span> now <span class="muted">· min 1 · max 2' in page
    assert "<h2>Resizes</h2>" in page and "Shrunk from 2 to 1 workers: reclaimed by quota cv-team" in page


def test_a_job_that_is_not_elastic_shows_no_workers_range(bob, cycle):
    from api.job_shapes import job_detail, with_shape_data

    job = create_job(bob, make_request(pods=1))
    body = job_detail(with_shape_data(Job.objects, detail=True).get(pk=job.pk))
    assert (body["ElasticWorkers"], body["ElasticResizes"]) == (None, None)


# -- in place (ElasticSpec ResizeInPlace) ---------------------------------------------------------

IN_PLACE = {**ELASTIC, "ResizeInPlace": True}


def resizes(sent):
    return sorted((m.payload["pod_id"], m.payload["generation"], m.payload["rank"], m.payload["world_size"])
                  for m in sent if m.task == "agent.resize_pods")


def running_in_place(bob, cycle, reports, sent):
    return running_borrower(bob, cycle, reports, sent, IN_PLACE)


def test_a_job_resized_in_place_starts_with_its_generation_and_membership_file(bob, cycle, reports, sent):
    job = running_in_place(bob, cycle, reports, sent)
    envs = starts(sent, job)
    assert {e["OPENDLC_ELASTIC_GENERATION"] for e in envs.values()} == {"0"}
    assert all(e["OPENDLC_MEMBERSHIP_FILE"].endswith(f"/{job.job_id}/checkpoints/.membership/{pod_id}.json")
               for pod_id, e in envs.items())


def test_a_reclaim_shrinks_a_job_in_place_its_kept_worker_keeps_running(alice, bob, cycle, reports, sent):
    job = running_in_place(bob, cycle, reports, sent)
    reclaim_one_node(alice, cycle, sent)
    first, second = current(job)
    assert stops(sent) == [(second.pod_id, "Shrunk")]  # the kept worker is not stopped
    assert resizes(sent) == [(first.pod_id, 1, 0, 1)]
    assert first.events.filter(reason="Resized").get().message.startswith("Rank 0 of 1 workers, in place (generation 1)")

    sent.clear()
    reports(report(second, "Failed", exit_code=143, reason="Shrunk"))
    assert starts(sent, job) == {}  # nothing restarts
    job.refresh_from_db()
    kept = Pod.objects.get(pk=first.pk)
    assert (job.status, job.restart_count, kept.status, kept.current) == ("Running", 0, "Running", True)


def test_a_job_grows_in_place_only_its_new_worker_starts(alice, bob, cycle, reports, sent):
    job = running_in_place(bob, cycle, reports, sent)
    lender = reclaim_one_node(alice, cycle, sent)
    first, second = current(job)
    reports(report(second, "Failed", exit_code=143, reason="Shrunk"))
    cycle()
    (lender_pod,) = lender.pods.all()
    reports(report(lender_pod, "Running"))
    reports(report(lender_pod, "Succeeded", exit_code=0))
    sent.clear()
    cycle()

    kept, grown = current(job)
    assert kept.pk == first.pk and grown.node_id is not None and stops(sent) == []
    (env,) = starts(sent, job).values()
    assert (env["RANK"], env["WORLD_SIZE"], env["OPENDLC_ELASTIC_GENERATION"]) == ("1", "2", "2")
    assert resizes(sent) == [(first.pod_id, 2, 0, 2)]
    assert Job.objects.get(pk=job.pk).restart_count == 0


def test_a_resize_restarts_the_workers_when_one_it_keeps_is_not_running_yet(alice, bob, cycle, reports, sent):
    create_job(bob, make_request(pods=2))
    cycle()
    job = create_job(bob, make_request(pods=2, oversold_type="ForceQuotaOverSold", elastic_spec=IN_PLACE))
    cycle()
    first, second = current(job)
    reports(report(second, "Running"))  # the first has not started yet: it cannot be told anything
    reclaim_one_node(alice, cycle, sent)
    assert stops(sent) == [(first.pod_id, "Resize"), (second.pod_id, "Shrunk")] and resizes(sent) == []
