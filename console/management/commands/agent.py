"""`manage.py agent --node NAME`: this machine's node agent; `--simulated`: the simulated nodes' agent.

The agent is a Celery worker on its own queue (`agent.<NAME>`, or `agent.simulated`). Its tasks
return at once: pods run in the background, in a thread pool that never waits on them. It talks to
the platform only through the broker (heartbeats, pod reports, logs, progress), never the ORM,
signed with the join token an admin issued for its node (`manage.py register_node NAME`, or
`register_node --simulated`), read from --token-file or OPENDLC_AGENT_TOKEN.
"""

import logging
import os
import socket

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger("agent")


class Command(BaseCommand):
    help = "Run a node agent: start and stop pods sent to this node, heartbeats, logs and progress."

    def add_arguments(self, parser):
        parser.add_argument("--node", default="", help="Node name (default: this host's name).")
        parser.add_argument("--simulated", action="store_true", help="Run the one agent of all simulated nodes.")
        parser.add_argument("--token-file", default="",
                            help="File holding this node's join token (manage.py register_node); "
                                 "default: the OPENDLC_AGENT_TOKEN environment variable.")
        parser.add_argument("--runtime", choices=("podman", "docker", "process"), default=None,
                            help="How pods run: as containers of their image (podman, docker) or as processes on "
                                 "this host, without their image (process). Default: podman or docker where one "
                                 "works, else process.")
        parser.add_argument("--pod-user", default=None,
                            help="The process runtime runs pods as this unprivileged user (name or uid), so that a "
                                 "pod cannot read the agent's environment or files. Default: nobody when the agent "
                                 "runs as root, else the agent's own user; '' for the agent's own user.")
        parser.add_argument("--concurrency", type=int, default=4, help="Message-handling threads.")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, **options):
        from agent import runtime, tasks  # noqa: F401  (registers agent.start_pods / agent.stop_pods)
        from console.celery import app

        agent = build_agent(app, options)
        agent.start()
        log.info("agent for %s consumes %s", agent.node or "all simulated nodes", agent.queue)
        worker = app.Worker(
            queues=[agent.queue], pool="threads", concurrency=options["concurrency"],
            hostname=f"agent-{agent.node or 'simulated'}@{socket.gethostname()}",
            loglevel=options["loglevel"], without_gossip=True, without_mingle=True, without_heartbeat=True,
        )
        try:
            worker.start()
        finally:
            agent.close()  # pods keep running: a restarted agent adopts them
        raise SystemExit(worker.exitcode or 0)


def process_executor(node: str, outbox, pod_user: str | None):
    from agent.process import PodUser, ProcessExecutor

    if pod_user is None:
        pod_user = "nobody" if os.geteuid() == 0 else ""
    user = None
    if pod_user:
        try:
            user = PodUser.named(pod_user)
        except ValueError as exc:
            raise CommandError(f"--pod-user: {exc}") from None
        if blocked := user.can_reach(settings.OPENDLC_POD_ROOT):
            raise CommandError(f"--pod-user {user.name} cannot enter {blocked} on the way to the pod root "
                               f"{settings.OPENDLC_POD_ROOT}: set OPENDLC_POD_ROOT to a directory it can reach, "
                               "or give --pod-user")
    log.info("process pods run as %s", user.name if user else "the agent's own user")
    return ProcessExecutor(node, settings.OPENDLC_POD_ROOT, outbox, pod_user=user)


def pod_executor(runtime: str | None, node: str, outbox, pod_user: str | None = None):
    """The executor of `--runtime`; without one, a container runtime that works here, else processes."""
    from agent.container import ContainerExecutor, RuntimeNotFound, default_runtime, find_runtime

    if runtime == "process":
        return process_executor(node, outbox, pod_user)
    if runtime is None:
        found = default_runtime()
        if found is None:
            log.warning("no container runtime works on this node (podman or docker): pods run as processes on "
                        "the host, without their image")
            return process_executor(node, outbox, pod_user)
    else:
        try:
            found = find_runtime(runtime)
        except RuntimeNotFound as exc:
            raise CommandError(f"--runtime {runtime}: {exc}") from None
    log.info("pods run as %s containers", found.name)
    return ContainerExecutor(node, settings.OPENDLC_POD_ROOT, outbox, found)


def build_agent(app, options):
    from agent.machine import discover
    from agent.metrics import PodSampler
    from agent.outbox import Outbox, celery_sender
    from agent.runtime import Agent
    from agent.simulated import SimulatedExecutor

    name = "simulated" if options["simulated"] else options["node"] or socket.gethostname()
    token = join_token(options.get("token_file") or "", name)
    outbox = Outbox(celery_sender(app, token, name))
    interval = settings.OPENDLC_HEARTBEAT_INTERVAL_S
    credential = {"token": token, "replay_window_s": settings.OPENDLC_AGENT_REPLAY_WINDOW_S}

    def send_heartbeat(beat: dict) -> None:
        # A heartbeat that waited in the broker longer than a few intervals says nothing any more.
        app.send_task("nodes.heartbeat", args=[beat], queue="default", expires=max(3 * interval, 30))

    if options["simulated"]:
        return Agent(None, SimulatedExecutor(outbox), outbox, None, send_heartbeat=send_heartbeat, heartbeat_s=interval,
                     **credential)
    executor = pod_executor(options.get("runtime"), name, outbox, options.get("pod_user"))
    return Agent(name, executor, outbox, discover(), send_heartbeat=send_heartbeat, heartbeat_s=interval,
                 sampler=PodSampler(), **credential)


def join_token(path: str, name: str) -> str:
    from agent.auth import read_token

    if path:
        try:
            return read_token(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--token-file: {exc}") from None
    token = os.environ.get("OPENDLC_AGENT_TOKEN", "").strip()
    if not token:
        how = "--simulated" if name == "simulated" else name
        raise CommandError(f"no join token: give --token-file or OPENDLC_AGENT_TOKEN (an admin issues one with "
                           f"`manage.py register_node {how}`)")
    return token
