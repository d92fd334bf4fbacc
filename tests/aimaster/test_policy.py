"""The policy and Other Configuration, without a database: which failures AIMaster retries."""

import pytest

from jobs.aimaster import FtConfig, OtherConfigError, failure_text, judge, other_config_error, parse_other_config

DEFAULT = FtConfig()
TRACEBACK = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"


@pytest.mark.parametrize("exit_code, text, retry", [
    (137, "", True),  # SIGKILL: OOM killer or an operator
    (134, "", True),  # SIGABRT: the NCCL watchdog aborted the rank
    (2, "", False),  # usage error
    (127, "bash: trian.py: command not found", False),
    (2, "NCCL WARN Net : Connection closed by remote peer", False),  # a fatal code beats the log
    (1, TRACEBACK + "RuntimeError: NCCL communicator was aborted on rank 3.", True),
    (1, TRACEBACK + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275", True),
    (1, "RuntimeError: CUDA error: an illegal memory access was encountered", True),
    (1, "ConnectionResetError: [Errno 104] Connection reset by peer", True),
    (1, "node-3:1234 [0] NCCL WARN Call to ibv_poll_cq failed", True),
    (1, '  File "train.py", line 3\n    def f(\nSyntaxError: invalid syntax', False),
    (1, "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.csv'", False),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", False),
    (1, "ValueError: shapes do not match", False),  # unknown: not retried
    (1, "", False),
])
def test_exit_code_and_error_msg_retries_transient_errors_only(exit_code, text, retry):
    assert judge(DEFAULT, exit_code=exit_code, reason="Error", text=text).retry is retry


def test_the_last_matching_line_of_the_log_decides():
    earlier_nccl_then_missing_file = "NCCL WARN retrying\nFileNotFoundError: No such file or directory: 'x'"
    earlier_missing_file_then_nccl = ("No such file or directory: '/etc/hostfile' (ignored)\n"
                                      "NCCL error: unhandled system error")
    assert not judge(DEFAULT, exit_code=1, reason="Error", text=earlier_nccl_then_missing_file).retry
    assert judge(DEFAULT, exit_code=1, reason="Error", text=earlier_missing_file_then_nccl).retry


def test_the_verdict_says_why_in_words():
    assert judge(DEFAULT, exit_code=137, reason="Error", text="").why == "exit code 137 is retryable"
    assert judge(DEFAULT, exit_code=1, reason="Error", text="Connection reset by peer").why == (
        "the log shows a transient error ('Connection reset by peer')")
    assert judge(DEFAULT, exit_code=1, reason="Error", text="boom").why == (
        "exit code 1 and no known transient error in the last lines of the log")


def test_on_failure_retries_every_failure():
    on_failure = FtConfig(policy="OnFailure")
    for code, text in [(2, ""), (1, "SyntaxError: invalid syntax"), (127, "command not found"), (1, "")]:
        assert judge(on_failure, exit_code=code, reason="Error", text=text).retry


def test_a_lost_node_is_retried_under_either_policy():
    assert judge(DEFAULT, exit_code=None, reason="NodeLost", text="").retry
    assert judge(FtConfig(fatal_exit_codes=frozenset()), exit_code=None, reason="NodeLost", text="").retry


def test_other_configuration_reads_the_documented_flags():
    flags = parse_other_config('--max-num-of-job-restart=5 --hang-detection-interval=600 --retryable-exit-codes=1,137 '
                               '--fatal-exit-codes=2 --job-execution-mode=Async --fault-tolerant-policy=OnFailure '
                               '--enable-job-hang-detection=true --max-num-of-preemption-restart=10 '
                               '--retryable-error-msg="Timeout waiting for" --retryable-error-msg=EAGAIN')
    assert flags == {
        "max_restarts": 5, "hang_interval_s": 600, "retryable_exit_codes": frozenset({1, 137}),
        "fatal_exit_codes": frozenset({2}), "run_type": "Asynchronous", "policy": "OnFailure",
        "hang_detection": True, "max_preemption_restarts": 10,
        "retryable_messages": ("Timeout waiting for", "EAGAIN"),
    }
    assert parse_other_config("") == {}
    assert parse_other_config("--max-num-of-preemption-restart=unlimited") == {"max_preemption_restarts": None}


@pytest.mark.parametrize("text, problem", [
    ("--max-restarts=3", "unknown flag '--max-restarts'; accepted flags: --job-execution-mode, --enable-job-restart,"),
    ("--max-num-of-job-restart=three", "--max-num-of-job-restart must be an integer from 0 to 100, got 'three'"),
    ("--max-num-of-job-restart", "--max-num-of-job-restart needs a value"),
    ("--job-hang-interval=10", "--job-hang-interval must be an integer from 60 to 86400, got '10'"),
    ("--retryable-exit-codes=1,x", "--retryable-exit-codes must be exit codes 0 to 255"),
    ("--fault-tolerant-policy=Always", "--fault-tolerant-policy must be one of ExitCodeAndErrorMsg, OnFailure"),
    ("--retryable-exit-codes=1,2 --fatal-exit-codes=2", "exit codes [2] are both retryable and fatal"),
    ('--fatal-error-msg="unclosed', "cannot be split into flags"),
])
def test_a_bad_flag_is_refused_naming_it(text, problem):
    assert problem in other_config_error(text)
    with pytest.raises(OtherConfigError):
        parse_other_config(text)


def test_a_good_other_configuration_has_no_error():
    assert other_config_error("--max-num-of-job-restart=3 --fatal-exit-codes=none") is None


def test_create_job_rejects_an_unknown_other_configuration_flag_by_name(alice):
    from jobs.services import JobRequest, RoleRequest, ValidationFailed, create_job
    from quotas.models import Workspace

    request = JobRequest(
        display_name="ft", user_command="true", workspace_id=Workspace.objects.get(name="ml-research").pk,
        roles=[RoleRequest(instance_type="ecs.g7.xlarge", image="python:3.11")], source="public",
        ft_enabled=True, ft_other_config="--max-num-of-job-restart=2 --restart-forever=yes",
    )
    with pytest.raises(ValidationFailed) as failed:
        create_job(alice, request)
    assert "--restart-forever" in failed.value.errors["ft_other_config"]


def test_a_pod_that_never_ran_is_described_without_an_exit_code():
    assert failure_text("j-worker-0", 3, "") == "Pod j-worker-0 failed with exit code 3"
    assert failure_text("j-worker-0", None, "podman could not start the container: no such device") == (
        "Pod j-worker-0 failed: podman could not start the container: no such device")
