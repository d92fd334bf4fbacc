"""Fixtures for notifications: a local HTTP receiver (http.server in a thread) that answers with the
codes a test scripts, Celery run in process (retries too, without their countdown), and a job of
alice's in ml-research to move through its states."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from console.celery import app
from jobs import dispatch, history
from jobs.states import JobStatus
from notify import delivery
from tests.console.conftest import quota_job


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setattr(dispatch, "send", lambda messages: None)
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)


@pytest.fixture
def eager_celery(monkeypatch):
    """Tasks run in the caller; a retry at once, so its backoff is 0 (test_backoff covers it)."""
    monkeypatch.setattr(delivery, "BACKOFF_BASE_S", 0)
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@dataclass
class Received:
    headers: dict
    body: str

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    codes: list[int] = field(default_factory=list)  # answered in turn; 200 once they run out
    received: list[Received] = field(default_factory=list)


@pytest.fixture
def receiver():
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            state.received.append(Received(dict(self.headers), body))
            self.send_response(state.codes.pop(0) if state.codes else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/hooks/opendlc"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def job(alice):
    return quota_job(alice, "bert-finetune")


def move(job, *statuses, reason=""):
    """Move the job through `statuses` as the platform does (history.change_status)."""
    for status in statuses:
        history.change_status(job, status, reason=reason if status == statuses[-1] else "")
    return job


def run(job):
    return move(job, JobStatus.ENV_PREPARING, JobStatus.RUNNING)
