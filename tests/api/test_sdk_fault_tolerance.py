"""Settings.ErrorMonitoringArgs takes the flags PAI documents for AIMaster, in both spellings, with
PAI's defaults; the console's fault-tolerance panel says the same in the same flags, so a job
cloned between the console and the SDK is configured the same."""

import re
from pathlib import Path

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc

from console.pages.create import clone_initial
from jobs import aimaster
from jobs.models import Job
from tests.api.test_sdk_jobs import create, rejected
from tests.console.test_create_job import form_data

API_MAP = Path(__file__).parents[2] / "docs" / "api-map.md"
PAI_DEFAULT_ARGS = ("--job-execution-mode=Sync --enable-job-restart=False --enable-job-hang-detection=False "
                    "--job-hang-interval=1800 --fault-tolerant-policy=ExitCodeAndErrorMsg")


def ft_job(client, args: str) -> Job:
    job_id = create(client, Settings={"EnableErrorMonitoringInAIMaster": True, "ErrorMonitoringArgs": args})
    return Job.objects.get(job_id=job_id)


def test_pais_flags_are_read_in_either_spelling(alice_dlc):
    job = ft_job(alice_dlc, "--job-execution-mode Async --enable-job-restart true --max-num-of-job-restart=5 "
                            "--enable-log-hang-detection True --job-hang-interval 600")
    config = aimaster.config_for(job)
    assert (config.run_type, config.max_restarts, config.hang_detection, config.hang_interval_s) == (
        "Asynchronous", 5, True, 600)


def test_without_flags_aimaster_keeps_pais_defaults_and_restarts_nothing(alice_dlc):
    job = ft_job(alice_dlc, "")
    config = aimaster.config_for(job)
    assert (config.run_type, config.max_restarts, config.hang_detection, config.hang_interval_s) == (
        "Synchronous", 0, False, 1800)
    got = alice_dlc.get_job(job.job_id, dlc.GetJobRequest()).body.settings
    assert got.error_monitoring_args == PAI_DEFAULT_ARGS


def test_a_restart_count_alone_does_not_turn_restarts_on(alice_dlc):
    assert aimaster.config_for(ft_job(alice_dlc, "--max-num-of-job-restart=5")).max_restarts == 0
    assert aimaster.config_for(ft_job(alice_dlc, "--enable-job-restart=True")).max_restarts == 3


def test_a_documented_flag_without_effect_here_is_accepted_and_named_in_an_event(alice_dlc):
    job = ft_job(alice_dlc, "--enable-c4d-hang-detection=True --enable-job-exit-hang-detection true "
                            "--job-exit-hang-interval 300")
    events = alice_dlc.get_job_events(job.job_id, dlc.GetJobEventsRequest()).body.events
    ignored = [e for e in events if " AIMasterFlagIgnored " in e]
    assert len(ignored) == 3
    assert "--enable-c4d-hang-detection=True is accepted but has no effect here" in ignored[0]


def test_an_unknown_flag_is_refused_with_the_known_ones(alice_dlc):
    error = rejected(lambda: ft_job(alice_dlc, "--enable-job-restart=True --restart-forever=yes"))
    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert "Settings.ErrorMonitoringArgs: unknown flag '--restart-forever'; accepted flags: " in error.message
    assert "--enable-job-restart" in error.message and "--enable-c4d-hang-detection" in error.message
    assert not Job.objects.exists()


def test_a_bad_value_is_refused_naming_the_flag(alice_dlc):
    error = rejected(lambda: ft_job(alice_dlc, "--enable-job-restart maybe"))
    assert "--enable-job-restart must be true or false, got 'maybe'" in error.message


def panel(**overrides):
    return form_data(**{"ft_enabled": "on", "ft_run_type": "Asynchronous", "ft_max_restarts": "2",
                        "ft_hang_detection": "on", "ft_hang_interval_minutes": "10", "ft_policy": "OnFailure",
                        "ft_other_config": "--retryable-exit-codes=1", **overrides})


def test_a_console_job_cloned_through_the_sdk_is_configured_the_same(alice_dlc, alice, client):
    client.force_login(alice)
    assert client.post("/jobs/create/", panel(display_name="from-console")).status_code == 302
    console_job = Job.objects.get(display_name="from-console")

    args = alice_dlc.get_job(console_job.job_id, dlc.GetJobRequest()).body.settings.error_monitoring_args
    assert args == ("--job-execution-mode=Async --enable-job-restart=True --max-num-of-job-restart=2 "
                    "--enable-job-hang-detection=True --job-hang-interval=600 --fault-tolerant-policy=OnFailure "
                    "--retryable-exit-codes=1")
    sdk_job = ft_job(alice_dlc, args)
    assert aimaster.config_for(sdk_job) == aimaster.config_for(console_job)


def test_a_maximum_of_no_restarts_in_the_console_is_restarts_off(alice_dlc, alice, client):
    client.force_login(alice)
    client.post("/jobs/create/", panel(display_name="no-restarts", ft_max_restarts="0"))
    job = Job.objects.get(display_name="no-restarts")
    args = alice_dlc.get_job(job.job_id, dlc.GetJobRequest()).body.settings.error_monitoring_args
    assert "--enable-job-restart=False" in args and "--max-num-of-job-restart" not in args


def test_an_sdk_job_cloned_in_the_console_is_configured_the_same(alice_dlc, alice, client):
    sdk_job = ft_job(alice_dlc, "--enable-job-restart True --max-num-of-job-restart 4 --job-execution-mode=Async "
                                "--enable-log-hang-detection=true --retryable-exit-codes=1")
    initial, _ = clone_initial(sdk_job)
    fields = {k: initial[k] for k in ("ft_run_type", "ft_max_restarts", "ft_hang_interval_minutes", "ft_policy",
                                      "ft_other_config")}
    client.force_login(alice)
    client.post("/jobs/create/", panel(display_name="cloned", **fields, ft_hang_detection="on"))
    assert initial["ft_hang_detection"] is True
    assert aimaster.config_for(Job.objects.get(display_name="cloned")) == aimaster.config_for(sdk_job)


@pytest.mark.parametrize("args", re.findall(r'"ErrorMonitoringArgs": "([^"]*)"', API_MAP.read_text()))
def test_the_api_maps_example_flags_are_accepted(args):
    assert aimaster.other_config_error(args) is None
