"""The web process as the Procfile starts it (gunicorn with gunicorn.conf.py): a long request line
reaches Django, which answers in the SDK's JSON shape, where gunicorn's default answered a plain 414."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def web(tmp_path):
    port = free_port()
    env = {**os.environ, "OPENDLC_VAR_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)  # unsigned requests are refused before any database read
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "console.wsgi", "-c", "gunicorn.conf.py",
                             "--bind", f"127.0.0.1:{port}", "--workers", "1"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/api/v1/jobs", timeout=10)  # refused unsigned, before any database read
            break
        except requests.RequestException:
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_a_long_request_line_is_answered_by_django_in_the_sdk_shape(web):
    response = requests.get(f"{web}/api/v1/jobs", params={"JobIds": ",".join(["dlc0123456789ab"] * 400)}, timeout=10)
    assert response.status_code == 400 and response.json()["Code"] == "MissingAuthorization", response.text


def test_a_nul_in_the_path_is_answered_in_the_sdk_shape(web):
    response = requests.get(f"{web}/api/v1/jobs/dlc%00abc", timeout=10)
    assert response.status_code == 400 and response.json()["Code"] == "InvalidParameter", response.text
