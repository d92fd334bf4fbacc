"""Run a command and start it again whenever it dies: the Procfile's services outlive a crash.

    python deploy/respawn.py celery -A console worker ...

honcho, which runs the Procfile, stops every service when one exits and restarts none (supervisord
or systemd would, but neither belongs in a one-command demo); docker-compose.yml says
`restart: unless-stopped` instead. A command that dies is started again after a pause that doubles
from 1 s to 30 s while it keeps dying young, and starts over at 1 s once it has run for a minute.
SIGTERM and SIGINT go to the command, and then this wrapper exits with its status.
"""

import signal
import subprocess
import sys
import time

FIRST_PAUSE_S, LONGEST_PAUSE_S, HEALTHY_AFTER_S = 1.0, 30.0, 60.0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: respawn.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    child = None
    stopping = False

    def forward(signum, _frame):
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    pause = FIRST_PAUSE_S
    while True:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        status = child.wait()
        if stopping:
            return status
        pause = FIRST_PAUSE_S if time.monotonic() - started >= HEALTHY_AFTER_S else pause
        print(f"respawn: {argv[0]} exited with status {status}; starting it again in {pause:g} s",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + pause
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        if stopping:
            return status
        pause = min(pause * 2, LONGEST_PAUSE_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
