"""The `dlc` command line, run as a user runs it (its own process, a config file of its own) against
the live server: it speaks only the public API, through the official SDKs."""

import argparse
import json
import os
import stat
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from dlc_cli import render, submit
from jobs.logs import store_chunks
from jobs.models import Job, Pod
from quotas.models import ResourceSpec
from spot.models import PriceHistory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The variables that would override the config file; a test's run sees only those it sets.
OVERRIDES = ("DLC_CONFIG", "DLC_ENDPOINT", "DLC_WORKSPACE_ID", "ALIBABA_CLOUD_ACCESS_KEY_ID",
             "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_REGION_ID")


def dlc_env(config_file, **variables) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
    return {**env, "DLC_CONFIG": str(config_file), "COLUMNS": "60", **variables}


def run_dlc(config_file, *args, **variables) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlc_cli", *args], check=False, cwd=ROOT,
                          env=dlc_env(config_file, **variables), capture_output=True, text=True, timeout=120)


def ok(config_file, *args) -> str:
    done = run_dlc(config_file, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def cfg(tmp_path, endpoint, alice_key, research):
    """A config file for alice in ml-research, written by `dlc config` itself."""
    path = tmp_path / "dlc.json"
    ok(path, "config", "--endpoint", f"http://{endpoint}", "--access_id", alice_key[0],
       "--access_key", alice_key[1], "--workspace_id", str(research.pk), "--region", "cn-hangzhou")
    return path


def submitted(cfg, *flags, name="cli-train") -> str:
    job_id = ok(cfg, "submit", "pytorchjob", "--name", name, "--command", "python train.py",
                "--worker_image", "pytorch:2", "--worker_spec", "ecs.g7.xlarge", *flags).strip()
    assert job_id.startswith("dlc"), job_id
    return job_id


# --- config ---------------------------------------------------------------------------------------

def test_config_is_saved_for_its_owner_only_and_shows_no_secret(cfg, alice_key):
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
    assert json.loads(cfg.read_text())["access_key_secret"] == alice_key[1]

    shown = ok(cfg, "config")
    assert alice_key[0] in shown and alice_key[1] not in shown and "****" in shown


def test_an_existing_config_file_is_made_private_when_rewritten(tmp_path):
    path = tmp_path / "dlc.json"
    path.write_text("{}")
    path.chmod(0o644)
    ok(path, "config", "--region", "cn-beijing")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"region": "cn-beijing"}


def test_environment_variables_win_over_the_file(cfg):
    done = run_dlc(cfg, "get", "jobs", ALIBABA_CLOUD_ACCESS_KEY_ID="LTAInotakey")
    assert done.returncode == 1
    assert done.stderr.startswith("dlc: InvalidAccessKeyId.NotFound: ")


def test_without_a_config_it_says_what_to_set(tmp_path):
    done = run_dlc(tmp_path / "none.json", "get", "jobs")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("dlc: no endpoint, access_key_id, access_key_secret configured; run `dlc config`")


# --- jobs -----------------------------------------------------------------------------------------

def test_a_submitted_job_shows_in_get_job(cfg, research):
    job_id = submitted(cfg, "--workers", "2", "--priority", "7", "--envs", "LR=0.1,EPOCHS=3",
                       "--spot_discount_limit", "0.4")

    job = json.loads(ok(cfg, "get", "job", job_id, "--output", "json"))
    assert (job["JobId"], job["DisplayName"], job["Status"]) == (job_id, "cli-train", "Bidding")
    assert (job["WorkspaceId"], job["Priority"], job["Envs"]) == (str(research.pk), 7, {"LR": "0.1", "EPOCHS": "3"})
    spec = job["JobSpecs"][0]
    assert (spec["PodCount"], spec["Image"], spec["EcsSpec"]) == (2, "pytorch:2", "ecs.g7.xlarge")
    assert spec["SpotSpec"] == {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4}

    table = ok(cfg, "get", "job", job_id)
    fields = dict(line.split(":", 1) for line in table.split("\n\n")[0].splitlines())
    assert (fields["Job"].strip(), fields["Status"].strip(), fields["Priority"].strip()) == (job_id, "Bidding", "7")
    assert f"{job_id}-worker-0" in table and f"{job_id}-worker-1" in table


def test_a_quota_job_asks_for_resources_and_idle_capacity_by_flag(cfg):
    job_id = ok(cfg, "submit", "tfjob", "--name", "on-quota", "--command", "python t.py", "--worker_image", "tf:2",
                "--resource_id", "quota00000002", "--worker_gpu", "4", "--worker_cpu", "16", "--worker_memory", "64Gi",
                "--oversold_type", "AcceptQuotaOverSold").strip()

    job = Job.objects.get(job_id=job_id)
    assert (job.job_type, job.quota.quota_id, job.oversold_type) == ("TFJob", "quota00000002", "AcceptQuotaOverSold")
    role = job.specs.get()
    assert (role.gpu, role.cpu, role.memory_mib) == (4, 16, 64 * 1024)


def test_get_jobs_filters_by_status_and_name(cfg):
    spot = submitted(cfg, "--spot_discount_limit", "0.4", name="sweep-a")
    plain = submitted(cfg, name="sweep-b")
    other = submitted(cfg, name="eval")

    by_name = json.loads(ok(cfg, "get", "jobs", "--name", "sweep", "-o", "json"))
    assert {j["JobId"] for j in by_name["Jobs"]} == {spot, plain}
    bidding = ok(cfg, "get", "jobs", "--name", "sweep", "--status", "Bidding")
    lines = bidding.splitlines()
    assert lines[0].split() == ["JOB", "ID", "NAME", "TYPE", "STATUS", "GPU", "QUOTA", "CREATED"]
    assert len(lines) == 2 and lines[1].split()[:4] == [spot, "sweep-a", "PyTorchJob", "Bidding"]
    assert other not in ok(cfg, "get", "jobs", "--name", "sweep")


def test_stop_then_delete_a_job(cfg):
    job_id = submitted(cfg)

    assert ok(cfg, "stop", "job", job_id) == f"stopping {job_id}\n"
    assert Job.objects.get(job_id=job_id).status in ("Stopping", "Stopped")
    assert json.loads(ok(cfg, "delete", "job", job_id, "-o", "json"))["JobId"] == job_id
    assert not Job.objects.filter(job_id=job_id).exists()


# --- logs -----------------------------------------------------------------------------------------

def test_logs_prints_the_stored_lines_of_the_first_pod_or_the_one_named(cfg):
    job_id = submitted(cfg, "--workers", "2")
    first, second = Pod.objects.filter(job__job_id=job_id).order_by("pod_id")
    store_chunks([{"pod_id": first.pod_id, "offset": 0, "text": "Hello World\nstep 1\n"},
                  {"pod_id": second.pod_id, "offset": 0, "text": "second pod\n"}])

    assert ok(cfg, "logs", job_id) == "Hello World\nstep 1\n"
    assert ok(cfg, "logs", job_id, second.pod_id) == "second pod\n"
    assert ok(cfg, "logs", job_id, "--max_lines", "1") == "Hello World\n"


def test_logs_follow_prints_new_lines_until_the_job_ends(cfg):
    job_id = submitted(cfg)
    pod = Pod.objects.get(job__job_id=job_id)
    store_chunks([{"pod_id": pod.pod_id, "offset": 0, "text": "epoch 1\n"}])

    follow = subprocess.Popen([sys.executable, "-m", "dlc_cli", "logs", job_id, "--follow"], cwd=ROOT,
                              env=dlc_env(cfg), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout.readline() == "epoch 1\n"
        store_chunks([{"pod_id": pod.pod_id, "offset": 8, "text": "epoch 2\nDONE\n"}])
        Job.objects.filter(job_id=job_id).update(status="Succeeded")
        rest, errors = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert (follow.returncode, rest, errors) == (0, "epoch 2\nDONE\n", "")


# --- quotas, nodes, prices ------------------------------------------------------------------------

def test_get_quotas_and_nodes_show_the_demo_cluster(cfg):
    quotas = ok(cfg, "get", "quotas").splitlines()
    platform = next(line for line in quotas if " ml-platform " in line)
    assert "4xecs.gn6v-c8g1.16xlarge" in platform and platform.split()[-1] == "32"

    nodes = json.loads(ok(cfg, "get", "nodes", "--quota_id", "quota00000002", "-o", "json"))
    assert nodes["TotalCount"] == 2
    table = ok(cfg, "get", "nodes", "--quota_id", "quota00000002").splitlines()
    assert len(table) == 3 and all("nlp-team" in row for row in table[1:])


def test_price_draws_the_spot_history_as_a_chart(cfg, demo_cluster):
    spec = ResourceSpec.objects.get(instance_type="ecs.gn7i-c8g1.2xlarge")  # on demand 0.147
    now = timezone.now()
    for hours, price in ((3, "0.0441"), (2, "0.0735"), (1, "0.0588")):
        PriceHistory.objects.create(spec=spec, at=now - timedelta(hours=hours), price=Decimal(price))

    chart = ok(cfg, "price", "ecs.gn7i-c8g1.2xlarge", "--days", "1").splitlines()
    assert chart[0] == "ecs.gn7i-c8g1.2xlarge: spot price as a share of on-demand, last 1 day(s)"
    assert chart[1] == "▁█▅"
    assert chart[3] == "low 0.30  high 0.50  now 0.40  (3 prices)"
    history = json.loads(ok(cfg, "price", "ecs.gn7i-c8g1.2xlarge", "-o", "json"))["SpotPriceHistory"]
    assert [p["SpotDiscount"] for p in history] == [0.3, 0.5, 0.4]


# --- exit statuses --------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("get", "jobs", "--bogus"),
    ("submit", "pytorchjob", "--name", "x", "--command", "c", "--worker_image", "i", "--envs", "NOVALUE"),
    ("submit", "pytorchjob", "--name", "x", "--command", "c", "--worker_image", "i",
     "--spot_discount_limit", "0.4", "--spot_price_limit", "0.01"),
    ("stop", "jobs", "dlc1"),
])
def test_a_usage_error_exits_2_with_the_verbs_usage_line(tmp_path, args):
    done = run_dlc(tmp_path / "unused.json", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"usage: dlc {args[0]}")


def test_every_verb_has_help(tmp_path):
    for verb in (("config",), ("submit", "tfjob"), ("get", "job"), ("get", "jobs"), ("get", "quotas"),
                 ("get", "nodes"), ("logs",), ("stop", "job"), ("delete", "job"), ("price",)):
        done = run_dlc(tmp_path / "unused.json", *verb, "--help")
        assert done.returncode == 0 and done.stdout.startswith(f"usage: dlc {' '.join(verb)}"), verb


def test_an_api_refusal_exits_1_with_its_code_and_message_on_one_line(cfg):
    done = run_dlc(cfg, "submit", "pytorchjob", "--name", "x", "--command", "c", "--worker_image", "pytorch:2",
                   "--worker_spec", "ecs.g7.xlarge", "--workers", "0", "--spot_discount_limit", "0.45")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("dlc: InvalidParameter: ")
    assert "JobSpecs[0].PodCount: must be an integer from 1 to 1000" in done.stderr
    assert "SpotDiscountLimit: must be one of 0.1, 0.2, ... 0.9" in done.stderr

    missing = run_dlc(cfg, "get", "job", "dlc-no-such-job")
    assert (missing.returncode, missing.stderr.split(":")[:2]) == (1, ["dlc", " EntityNotExist.Job"])


# --- pieces without the server ---------------------------------------------------------------------

def test_flags_map_to_the_create_job_body_leaving_out_what_was_not_given():
    parser = argparse.ArgumentParser()
    submit.add_flags(parser)
    args = parser.parse_args(["--name", "n", "--command", "c", "--worker_image", "img", "--data_sources", "d-1,d-2",
                              "--spot_price_limit", "0.02"])
    assert submit.request_body("xgboostjob", args, "42") == {
        "DisplayName": "n", "JobType": "XGBoostJob", "UserCommand": "c", "WorkspaceId": "42",
        "JobSpecs": [{"Type": "Worker", "PodCount": 1, "Image": "img",
                      "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": 0.02}}],
        "DataSources": [{"DataSourceId": "d-1"}, {"DataSourceId": "d-2"}],
    }


def test_a_sparkline_averages_into_buckets_from_lowest_to_highest_block():
    assert render.sparkline([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], 8) == "▁▂▃▄▅▆▇█"
    assert render.sparkline([1, 3, 5, 5, 9, 9], 3) == "▁▄█"
    assert render.sparkline([0.4, 0.4], 10) == "▁▁"
