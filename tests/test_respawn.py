"""deploy/respawn.py: a Procfile service that dies is started again; a stop reaches the service."""

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESPAWN = [sys.executable, str(ROOT / "deploy" / "respawn.py")]


def wait_for(test, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_command_that_dies_is_started_again(tmp_path):
    runs = tmp_path / "runs"
    crash = f"open({str(runs)!r}, 'a').write('ran\\n'); raise SystemExit(3)"
    proc = subprocess.Popen([*RESPAWN, sys.executable, "-c", crash], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: runs.exists() and runs.read_text().count("ran") >= 2)  # after a pause of 1 s
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert "exited with status 3; starting it again in 1 s" in proc.stderr.read()


def test_a_stop_goes_to_the_command_and_ends_the_wrapper_with_its_status(tmp_path):
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    service = (f"import signal, sys, time, pathlib\n"
               f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(stopped)!r}).touch(), sys.exit(7)))\n"
               f"pathlib.Path({str(ready)!r}).touch()\n"
               f"while True: time.sleep(0.1)\n")
    proc = subprocess.Popen([*RESPAWN, sys.executable, "-c", service])
    wait_for(ready.exists)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 7 and stopped.exists()
