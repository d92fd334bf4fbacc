"""AIMaster: the fault-tolerance engine of a job (restart on failure, preemption, lost node, hang).

    1. Configure: the job's form fields, overridden by its "Other Configuration" flags.
    2. Judge: is this failure worth a restart? (`judge`, pure)
    3. Restart or fail: count it, record it (RestartRecord, job events), then
       - Synchronous, or any preemption / spot release / hang / lost node: stop every pod of the
         job (reason 'Restart'); once none is live, every pod gets a new incarnation (the old rows
         stay, current=False) and the job is re-queued: Restarting -> Queuing (Bidding for spot),
         so the scheduler places the whole gang again.
       - Asynchronous, a pod that failed on a node that is still Ready and still has room for it
         (its own GPU indices free): only that pod gets a new incarnation, bound to the same node
         and GPUs and started at once (Restarting -> EnvPreparing -> Running); the other pods run
         on. The scheduler core places whole jobs only, so when the node cannot take it back the
         whole job is re-queued as in Synchronous mode.
    4. Running again: the open restart records get `running_again_at` (lifecycle calls
       `job_running` when the job reaches Running).

Failures, lost nodes and hangs count against Maximum Job Restarts; preemptions (idle reclaim,
reason Preempted) and spot releases (SpotReleased) count only against their own limit, unlimited
unless set. Without fault tolerance nothing here acts: the job fails as before.

Policy `ExitCodeAndErrorMsg` (the default), in this order:
    - a lost node is always retried (the infrastructure failed, not the code);
    - exit code in the fatal codes (default 2 usage error, 126 not executable, 127 command not
      found) -> fatal; in the retryable codes (default 134 SIGABRT: the NCCL/c10d watchdog aborts
      a rank whose collective timed out; 137 SIGKILL: the host's OOM killer or an operator) -> retry;
    - otherwise the agent's message and the last LOG_TAIL_LINES lines of the pod's log decide: the
      LAST line matching a known transient error (NCCL errors, CUDA illegal memory access,
      connection reset, ...) or a known fatal one (SyntaxError, No such file or directory, CUDA
      out of memory, ...) wins, since the error nearest the exit is its cause; a line matching both
      is fatal;
    - nothing matched -> fatal (retrying an unknown error would repeat it up to the limit).
Policy `OnFailure` retries every failure.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction
from django.db.models import Max
from prometheus_client import Counter

from jobs import dispatch, history
from jobs.cycle_requests import request_cycle
from jobs.logs import read_logs
from jobs.models import (FaultTolerancePolicy, Job, Pod, PodLog, RestartRecord, RunType, Source, incarnation_id,
                         pod_name)
from jobs.states import JobStatus
from quotas.models import NodeStatus

log = logging.getLogger(__name__)

# Stops that end a pod evicted and take its whole job down; a resize's (Shrunk) leaves the job
# running at its new size (jobs/elastic.py).
EVICTIONS = tuple(r for r in dispatch.EVICTING_REASONS if r not in dispatch.RESIZING)

Cause = RestartRecord.Cause
COUNTED = frozenset({Cause.FAILURE, Cause.NODE_LOST, Cause.HANG})
NODE_LOST = "NodeLost"  # the reason jobs/nodes.py gives a pod of a node without heartbeats
MAX_RESTARTS_EXCEEDED = "MaxRestartsExceeded"
MAX_PREEMPTION_RESTARTS_EXCEEDED = "MaxPreemptionRestartsExceeded"
LOG_TAIL_LINES = 64
RESTARTS = Counter("opendlc_restarts", "AIMaster restarts, by cause (RestartRecord.Cause)", ["cause"])
LOG_TAIL_BYTES = 16 * 1024

DEFAULT_RETRYABLE_EXIT_CODES = frozenset({134, 137})
DEFAULT_FATAL_EXIT_CODES = frozenset({2, 126, 127})
# Matched case-insensitively as substrings of one log line.
DEFAULT_RETRYABLE_MESSAGES = (
    "NCCL error", "NCCL WARN", "ncclSystemError", "ncclInternalError", "ncclRemoteError",
    "NCCL communicator was aborted", "Watchdog caught collective operation timeout",
    "CUDA error: an illegal memory access", "CUDA error: unspecified launch failure",
    "uncorrectable ECC error", "Connection reset by peer", "Connection refused", "Broken pipe",
    "RendezvousTimeoutError", "DistNetworkError",
)
DEFAULT_FATAL_MESSAGES = (
    "SyntaxError", "IndentationError", "NameError", "ModuleNotFoundError", "ImportError",
    "No such file or directory", "Permission denied", "command not found", "CUDA out of memory",
)


# ---- 1. configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class FtConfig:
    run_type: str = RunType.SYNCHRONOUS
    policy: str = FaultTolerancePolicy.EXIT_CODE_AND_ERROR_MSG
    max_restarts: int = 3
    max_preemption_restarts: int | None = None  # None: unlimited
    hang_detection: bool = False
    hang_interval_s: int = 1800
    retryable_exit_codes: frozenset[int] = DEFAULT_RETRYABLE_EXIT_CODES
    fatal_exit_codes: frozenset[int] = DEFAULT_FATAL_EXIT_CODES
    retryable_messages: tuple[str, ...] = DEFAULT_RETRYABLE_MESSAGES
    fatal_messages: tuple[str, ...] = DEFAULT_FATAL_MESSAGES


class OtherConfigError(ValueError):
    """A flag of Other Configuration that is unknown or has a bad value; the message names it."""


def _int_flag(low: int, high: int):
    def parse(name: str, value: str) -> int:
        if not value.isdigit() or not low <= int(value) <= high:
            raise OtherConfigError(f"{name} must be an integer from {low} to {high}, got {value!r}")
        return int(value)
    return parse


def _codes_flag(name: str, value: str) -> frozenset[int]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if value.strip().lower() == "none":
        return frozenset()
    if not parts or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise OtherConfigError(f"{name} must be exit codes 0 to 255 separated by commas (or none), got {value!r}")
    return frozenset(int(p) for p in parts)


def _bool_flag(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise OtherConfigError(f"{name} must be true or false, got {value!r}")
    return value.lower() == "true"


def _choice_flag(choices: dict[str, str]):
    def parse(name: str, value: str) -> str:
        if value not in choices:
            raise OtherConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return choices[value]
    return parse


def _text_flag(name: str, value: str) -> str:
    if not value.strip():
        raise OtherConfigError(f"{name} needs a text to match, e.g. {name}=\"Timeout waiting for\"")
    return value


def _preemption_limit(name: str, value: str) -> int | None:
    return None if value.lower() == "unlimited" else _int_flag(0, 1000)(name, value)


RUN_TYPES = {"Sync": RunType.SYNCHRONOUS, "Async": RunType.ASYNCHRONOUS,
             RunType.SYNCHRONOUS: RunType.SYNCHRONOUS, RunType.ASYNCHRONOUS: RunType.ASYNCHRONOUS}
POLICIES = {p: p for p in FaultTolerancePolicy.values}

# flag -> (FtConfig field, parser, repeatable: values are added to the defaults). The names are
# PAI's (AIMaster's parameter table); restart_enabled is no FtConfig field: resolve() applies it.
FLAGS = {
    "--job-execution-mode": ("run_type", _choice_flag(RUN_TYPES), False),
    "--enable-job-restart": ("restart_enabled", _bool_flag, False),
    "--max-num-of-job-restart": ("max_restarts", _int_flag(0, 100), False),
    "--max-num-of-preemption-restart": ("max_preemption_restarts", _preemption_limit, False),
    "--enable-job-hang-detection": ("hang_detection", _bool_flag, False),
    # Hang Detection here is the log-based kind: no output and no progress for the interval.
    "--enable-log-hang-detection": ("hang_detection", _bool_flag, False),
    "--job-hang-interval": ("hang_interval_s", _int_flag(60, 86400), False),
    "--hang-detection-interval": ("hang_interval_s", _int_flag(60, 86400), False),
    "--fault-tolerant-policy": ("policy", _choice_flag(POLICIES), False),
    "--retryable-exit-codes": ("retryable_exit_codes", _codes_flag, False),
    "--fatal-exit-codes": ("fatal_exit_codes", _codes_flag, False),
    "--retryable-error-msg": ("retryable_messages", _text_flag, True),
    "--fatal-error-msg": ("fatal_messages", _text_flag, True),
}
_EXIT_HANG = "hangs on exit are not watched here; Hang Detection watches the running job"
# PAI documents these, but nothing here acts on them: accepted, checked, and named in a job event.
NO_EFFECT_FLAGS = {
    "--enable-c4d-hang-detection": (_bool_flag, "C4D diagnoses through Alibaba's ACCL library, which this "
                                                "cluster does not run"),
    "--enable-job-exit-hang-detection": (_bool_flag, _EXIT_HANG),
    "--job-exit-hang-interval": (_int_flag(1, 86400), _EXIT_HANG),
}
# The flags Create Job's fault-tolerance panel has fields for; the others stay Other Configuration.
PANEL_FLAGS = frozenset({"--job-execution-mode", "--enable-job-restart", "--max-num-of-job-restart",
                         "--enable-job-hang-detection", "--enable-log-hang-detection", "--job-hang-interval",
                         "--hang-detection-interval", "--fault-tolerant-policy"})
DEFAULT_MAX_RESTARTS = 3  # PAI's --max-num-of-job-restart
# What AIMaster does when the SDK gives no flags: PAI's defaults, restarts off (--enable-job-restart).
PAI_DEFAULTS = FtConfig(max_restarts=0)


def flag_values(text: str) -> list[tuple[str, str]]:
    """(flag, value) pairs in either spelling PAI shows, `--flag=value` or `--flag value`, quoted
    by shell rules. Raises OtherConfigError for an unknown flag (listing the known ones)."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as e:
        raise OtherConfigError(f"cannot be split into flags: {e}") from None
    pairs = []
    while tokens:
        name, eq, value = tokens.pop(0).partition("=")
        if name not in FLAGS and name not in NO_EFFECT_FLAGS:
            raise OtherConfigError(f"unknown flag {name!r}; accepted flags: {', '.join([*FLAGS, *NO_EFFECT_FLAGS])}")
        if not eq and tokens and not tokens[0].startswith("--"):
            eq, value = "=", tokens.pop(0)
        if not eq:
            raise OtherConfigError(f"{name} needs a value: {name}=VALUE")
        pairs.append((name, value))
    return pairs


def parse_other_config(text: str) -> dict:
    """The FtConfig fields that "Other Configuration" (the API's ErrorMonitoringArgs) sets, plus
    restart_enabled when --enable-job-restart is given. Raises OtherConfigError.

    Flags `--name=value` or `--name value`, separated by spaces; quote a value with spaces:

        --job-execution-mode=M              Run Type: Sync, Async, Synchronous or Asynchronous
        --enable-job-restart=B              restart on a failure, hang or lost node, True or False
        --max-num-of-job-restart=N          Maximum Job Restarts, 0-100
        --max-num-of-preemption-restart=N   restarts after preemption/spot release, 0-1000 or unlimited
        --enable-job-hang-detection=B       Hang Detection, True or False
        --enable-log-hang-detection=B       the same (hangs are detected from the log here)
        --job-hang-interval=S               hang interval in seconds, 60-86400
        --hang-detection-interval=S         the same
        --fault-tolerant-policy=P           ExitCodeAndErrorMsg or OnFailure
        --retryable-exit-codes=1,137        replaces the default retryable codes (134,137); none for none
        --fatal-exit-codes=2                replaces the default fatal codes (2,126,127); none for none
        --retryable-error-msg="TEXT"        a log line containing TEXT is transient; repeatable, adds
        --fatal-error-msg="TEXT"            a log line containing TEXT is fatal; repeatable, adds

    and NO_EFFECT_FLAGS, checked but without effect. They override the form's fields (resolve).
    """
    found: dict = {}
    for name, value in flag_values(text):
        if name in NO_EFFECT_FLAGS:
            NO_EFFECT_FLAGS[name][0](name, value)
            continue
        field, parse, repeatable = FLAGS[name]
        parsed = parse(name, value)
        found[field] = found.get(field, ()) + (parsed,) if repeatable else parsed
    both = found.get("retryable_exit_codes", frozenset()) & found.get("fatal_exit_codes", frozenset())
    if both:
        raise OtherConfigError(f"exit codes {sorted(both)} are both retryable and fatal; choose one")
    return found


def resolve(text: str, base: FtConfig) -> FtConfig:
    """`base` (the form's fields, or PAI_DEFAULTS for the SDK) with the flags of `text` on top: the
    one reading of AIMaster's flags, whichever face wrote them. Raises OtherConfigError.

    Restarts need --enable-job-restart=True, or a base that restarts (Maximum Job Restarts above 0)."""
    flags = parse_other_config(text)
    enabled = flags.pop("restart_enabled", base.max_restarts > 0)
    count = flags.pop("max_restarts", base.max_restarts or DEFAULT_MAX_RESTARTS)
    for field in ("retryable_messages", "fatal_messages"):
        if field in flags:
            flags[field] = getattr(base, field) + flags[field]
    return replace(base, max_restarts=count if enabled else 0, **flags)


def job_fields(config: FtConfig) -> dict:
    """The Job (and JobRequest) fields that hold a configuration."""
    return {"ft_run_type": config.run_type, "ft_max_restarts": config.max_restarts,
            "ft_max_preemption_restarts": config.max_preemption_restarts, "ft_hang_detection": config.hang_detection,
            "ft_hang_interval_s": config.hang_interval_s, "ft_policy": config.policy}


def panel_flags(config: FtConfig) -> list[str]:
    """The flags that say what the fault-tolerance panel's fields say (GetJob's ErrorMonitoringArgs)."""
    flags = [f"--job-execution-mode={'Async' if config.run_type == RunType.ASYNCHRONOUS else 'Sync'}",
             f"--enable-job-restart={config.max_restarts > 0}"]
    if config.max_restarts:
        flags.append(f"--max-num-of-job-restart={config.max_restarts}")
    return flags + [f"--enable-job-hang-detection={config.hang_detection}",
                    f"--job-hang-interval={config.hang_interval_s}", f"--fault-tolerant-policy={config.policy}"]


def other_flags(text: str) -> str:
    """The flags of `text` the panel has no field for, each as `--flag=value` (Clone keeps them)."""
    return shlex.join(f"{name}={value}" for name, value in flag_values(text) if name not in PANEL_FLAGS)


def no_effect_notes(text: str) -> list[str]:
    """One sentence per flag of `text` that PAI documents but nothing here acts on."""
    return [f"AIMaster flag {name}={value} is accepted but has no effect here: {NO_EFFECT_FLAGS[name][1]}"
            for name, value in flag_values(text) if name in NO_EFFECT_FLAGS]


def other_config_error(text: str) -> str | None:
    """For create_job's validation: what is wrong with Other Configuration, or None."""
    try:
        parse_other_config(text)
    except OtherConfigError as e:
        return str(e)
    return None


# The job fields config_for reads.
CONFIG_FIELDS = ("ft_enabled", "ft_run_type", "ft_policy", "ft_max_restarts", "ft_max_preemption_restarts",
                 "ft_hang_detection", "ft_hang_interval_s", "ft_other_config")


def config_for(job: Job) -> FtConfig:
    """The job's fields with its Other Configuration flags applied on top."""
    config = FtConfig(
        run_type=job.ft_run_type, policy=job.ft_policy, max_restarts=job.ft_max_restarts,
        max_preemption_restarts=job.ft_max_preemption_restarts, hang_detection=job.ft_hang_detection,
        hang_interval_s=job.ft_hang_interval_s,
    )
    try:
        return resolve(job.ft_other_config, config)
    except OtherConfigError as e:  # stored before validation checked it: the fields still apply
        log.warning("job %s: Other Configuration ignored: %s", job.job_id, e)
        return config


def error_monitoring_args(job: Job) -> str:
    """The job's AIMaster configuration as PAI's flags: the panel's, then the others it was given."""
    try:
        others = other_flags(job.ft_other_config)
    except OtherConfigError:
        others = ""
    return " ".join([*panel_flags(config_for(job)), *([others] if others else [])])


# ---- 2. judge (pure) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    retry: bool
    why: str


def judge(config: FtConfig, *, exit_code: int | None, reason: str, text: str) -> Verdict:
    """Retry this failure or not, and why, in words for the job's events. `text`: the agent's
    message and the last lines of the pod's log."""
    if reason == NODE_LOST:
        return Verdict(True, "the node was lost")
    if config.policy == FaultTolerancePolicy.ON_FAILURE:
        return Verdict(True, "policy OnFailure retries every failure")
    if exit_code is not None and exit_code in config.fatal_exit_codes:
        return Verdict(False, f"exit code {exit_code} is fatal")
    if exit_code is not None and exit_code in config.retryable_exit_codes:
        return Verdict(True, f"exit code {exit_code} is retryable")
    for line in reversed(text.splitlines()):
        fatal = _matching(line, config.fatal_messages)
        if fatal:
            return Verdict(False, f"the log shows a fatal error ({fatal!r})")
        transient = _matching(line, config.retryable_messages)
        if transient:
            return Verdict(True, f"the log shows a transient error ({transient!r})")
    return Verdict(False, f"exit code {exit_code} and no known transient error in the last lines of the log")


def _matching(line: str, patterns: tuple[str, ...]) -> str | None:
    lowered = line.lower()
    return next((p for p in patterns if p.lower() in lowered), None)


# ---- 3. restart or fail ------------------------------------------------------------------------


def failure_text(pod_id: str, exit_code: int | None, message: str) -> str:
    """A failed pod in words; a pod that never ran (its container did not start) has no exit code."""
    what = f"Pod {pod_id} failed" + (f" with exit code {exit_code}" if exit_code is not None else "")
    return what + (f": {message}" if message else "")


def after_pod_failure(job: Job, pod: Pod, *, exit_code: int | None, reason: str, message: str,
                      now: datetime) -> bool:
    """A current pod of an active job failed or was evicted (job row locked by the caller).

    False: fault tolerance is off, the caller fails the job as usual. True: AIMaster restarted the
    job, or failed it with its own reason (not retryable, or a restart limit reached).
    """
    if not job.ft_enabled:
        return False
    config = config_for(job)
    if pod.preempted:
        return restart_or_fail(job, config, preemption_cause(pod), preemption_message(pod), now, pod=pod)
    if (evicted := evicted_peer(job, pod)) is not None:
        return restart_or_fail(job, config, preemption_cause(evicted), preemption_message(evicted), now, pod=pod)
    what = failure_text(pod.pod_id, exit_code, message)
    verdict = judge(config, exit_code=exit_code, reason=reason, text=f"{message}\n{log_tail(pod)}")
    if not verdict.retry:
        fail(job, reason or "PodFailed", f"{what}; not restarted: {verdict.why}", now)
        return True
    cause = Cause.NODE_LOST if reason == NODE_LOST else Cause.FAILURE
    return restart_or_fail(job, config, cause, f"{what}; {verdict.why}", now, pod=pod)


def restart_or_fail(job: Job, config: FtConfig, cause: str, message: str, now: datetime, *,
                    pod: Pod | None = None) -> bool:
    """Restart the job for `cause` if its limit allows, else fail it. Returns True."""
    limit_reason = _limit_reached(job, config, cause)
    if limit_reason:
        fail(job, limit_reason[0], f"{message}; not restarted: {limit_reason[1]}", now)
        return True
    record, step = begin_restart(job, config, cause, message, now)
    record.save()
    job.save()
    history.record([step])
    in_place = cause == Cause.FAILURE and config.run_type == RunType.ASYNCHRONOUS and pod is not None
    if in_place and _restart_pod_in_place(job, pod, now):
        return True
    dispatch.send_on_commit(dispatch.stop_pods(dispatch.live_pods(job), dispatch.RESTART,
                                               f"Restarting the job: {message}", job.termination_grace_s))
    requeue_when_gone(job, now)
    return True


def begin_restart(job: Job, config: FtConfig, cause: str, message: str, now: datetime
                  ) -> tuple[RestartRecord, history.Transition]:
    """A restart the limit allows, on the instance only: the count, the unsaved record and the
    step to Restarting (save the job, the record, and record the step). lifecycle applies a batch
    of preempted pods' reports with it, many jobs in a few statements."""
    counted = cause in COUNTED
    if counted:
        job.restart_count += 1
        label = f"restart {job.restart_count} of {config.max_restarts}"
    else:
        job.preemption_restart_count += 1
        label = f"preemption restart {job.preemption_restart_count}"
        label += f" of {config.max_preemption_restarts}" if config.max_preemption_restarts is not None else ""
    record = RestartRecord(job=job, cause=cause, message=message, counted=counted, at=now)
    transaction.on_commit(RESTARTS.labels(cause).inc)  # not for a restart whose transaction rolls back
    return record, history.transition(job, JobStatus.RESTARTING, reason=f"Restart{cause}",
                                   message=f"AIMaster {label} ({cause}): {message}", at=now)


def evicted_peer(job: Job, pod: Pod) -> Pod | None:
    """Another current pod of the job that a preemption, a spot release or a drain is stopping,
    when `pod` failed: a gang's workers share collectives, so the peers of a stopped worker fail
    too, and one's end may be applied before the evicted pod's own. Then the eviction is the
    cause, whichever end came first."""
    return (dispatch.live_pods(job).filter(current=True, terminating=True, reason_code__in=EVICTIONS)
            .exclude(pk=pod.pk).first())


def preemption_cause(pod: Pod) -> str:
    return Cause.SPOT_RELEASE if pod.reason_code == dispatch.SPOT_RELEASED else Cause.PREEMPTION


def preemption_message(pod: Pod) -> str:
    return f"Resource Preempted: {pod.reason_message}"


def restarts_after_preemption(job: Job, pod: Pod) -> bool:
    """Whether the preemption of this pod (evicted) restarts its job rather than failing it:
    fault tolerance on and the preemption limit not reached."""
    return job.ft_enabled and _limit_reached(job, config_for(job), preemption_cause(pod)) is None


def _limit_reached(job: Job, config: FtConfig, cause: str) -> tuple[str, str] | None:
    if cause in COUNTED:
        if job.restart_count >= config.max_restarts:
            return MAX_RESTARTS_EXCEEDED, (f"the job was restarted {job.restart_count} times, "
                                           f"the maximum (Maximum Job Restarts = {config.max_restarts})")
        return None
    limit = config.max_preemption_restarts
    if limit is not None and job.preemption_restart_count >= limit:
        return MAX_PREEMPTION_RESTARTS_EXCEEDED, (f"the job was restarted {job.preemption_restart_count} times "
                                                  f"after preemption, the maximum ({limit})")
    return None


def fail(job: Job, reason: str, message: str, now: datetime) -> None:
    """Job -> Failed; its live pods are stopped."""
    dispatch.send_on_commit(dispatch.stop_pods(dispatch.live_pods(job), dispatch.STOPPED, f"Job failed: {message}",
                                               job.termination_grace_s))
    history.change_status(job, JobStatus.FAILED, reason=reason, message=message, now=now)


def requeue_when_gone(job: Job, now: datetime) -> bool:
    """Restarting and no pod live any more: new incarnations of every pod, back into the queue.

    Called when the restart begins and after each pod of a Restarting job finishes. True when
    the job was re-queued.
    """
    if job.status != JobStatus.RESTARTING or dispatch.live_pods(job).exists():
        return False
    for pod in Pod.objects.filter(job=job, current=True).order_by("role", "index"):
        _new_incarnation(pod, now)
    target, step = requeue_step(job)
    history.change_status(job, target, now=now, **step)
    request_cycle()
    return True


def requeue_step(job: Job) -> tuple[str, dict]:
    """The status a re-queued job waits in, and the reason and message of that step."""
    target = JobStatus.BIDDING if job.source == Source.SPOT else JobStatus.QUEUING
    return target, {"reason": "Requeued", "message": f"All pods stopped; the job waits in {target} to run again"}


def _new_incarnation(pod: Pod, now: datetime, **bound) -> Pod:
    Pod.objects.filter(pk=pod.pk).update(current=False)
    new = next_incarnation(pod, job_id=pod.job.job_id, now=now, **bound)
    new.save(force_insert=True)
    return new


def next_incarnation(pod: Pod, *, job_id: str, now: datetime, **bound) -> Pod:
    """The unsaved next incarnation of a pod of the job `job_id` (the old one is no longer current)."""
    n = pod.incarnation + 1
    return Pod(pod_id=incarnation_id(pod_name(job_id, pod.role, pod.index), n), job_id=pod.job_id, role=pod.role,
               index=pod.index, incarnation=n, cpu_m=pod.cpu_m, mem_mib=pod.mem_mib, gpu=pod.gpu, created_at=now,
               **bound)


def _restart_pod_in_place(job: Job, pod: Pod, now: datetime) -> bool:
    """Asynchronous: a new incarnation of the failed pod on its node and GPUs, if they are still
    free; started at once. False when the node cannot take it back."""
    node = pod.node
    if node is None or node.status != NodeStatus.READY or node.cordoned or not _room_for(pod):
        return False
    new = _new_incarnation(pod, now, node=node, gpu_indices=list(pod.gpu_indices), kind=pod.kind, bound_at=now)
    history.change_status(job, JobStatus.ENV_PREPARING, reason="PodRestarted",
                   message=f"Pod {new.pod_id} restarts on {node.name}; the other pods keep running", now=now)
    dispatch.send_on_commit([m for m in dispatch.start_messages(job) if m.payload["pod_id"] == new.pod_id])
    return True


def _room_for(pod: Pod) -> bool:
    others = list(Pod.objects.holding().filter(node=pod.node).exclude(pk=pod.pk))
    taken = {g for p in others for g in p.gpu_indices}
    spec = pod.node.spec
    return (not taken & set(pod.gpu_indices)
            and sum(p.gpu for p in others) + pod.gpu <= spec.gpu
            and sum(p.cpu_m for p in others) + pod.cpu_m <= spec.cpu_m
            and sum(p.mem_mib for p in others) + pod.mem_mib <= spec.memory_mib)


def log_tail(pod: Pod) -> str:
    """The last LOG_TAIL_LINES lines of the pod's log, as far as it has arrived."""
    end = PodLog.objects.filter(pod=pod).aggregate(end=Max("end"))["end"]
    if not end:
        return ""
    page = read_logs(pod, max(0, end - LOG_TAIL_BYTES), LOG_TAIL_BYTES)
    return "\n".join(page.lines[-LOG_TAIL_LINES:])


# ---- 4. running again ----------------------------------------------------------------------------


def awaiting_running(job_pks: list[int]) -> set[int]:
    """Those of these jobs with a restart record still waiting for the job to run again."""
    return set(RestartRecord.objects.filter(job_id__in=job_pks, running_again_at__isnull=True)
               .values_list("job_id", flat=True))


def job_running(job: Job, now: datetime) -> int:
    """The job runs again: its open restart records end now, each with an event. Returns how many."""
    records = list(RestartRecord.objects.filter(job=job, running_again_at__isnull=True))
    for record in records:
        record.running_again_at = now
        record.save(update_fields=["running_again_at"])
        job.events.create(at=now, reason="RunningAgain",
                          message=f"Running again {record.duration_s:.0f} s after the {record.cause} restart")
    return len(records)


def pod_finished_while_restarting(job: Job, now: datetime) -> None:
    """A pod of a Restarting job ended (stopped for the restart, or failed on its own meanwhile)."""
    requeue_when_gone(job, now)

