"""Real torchrun agents started with the environment the platform gives an elastic job's workers:
they form one process group at each size the job runs at, and a start below the job's maximum
does not wait out torchrun's 30-second last call for workers the platform will never start."""

import socket
import subprocess
import sys
import textwrap

import pytest

from tests.jobs.conftest import report
from tests.jobs.test_elastic_jobs import current, reclaim_one_node, running_borrower, starts

pytest.importorskip("torch")

# Each worker joins the group, sums its rank + 1 with the others' and prints what it saw. It leaves
# the group before it exits: a gloo group left to the interpreter's exit can abort the process
# ("terminate called without an active exception"), and its torchrun agent then fails while the
# other waits out its 300-second exit barrier.
WORKER = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    print(f"world={dist.get_world_size()} sum={total.item():g}", flush=True)
    dist.destroy_process_group()
""")
# The test holds torchrun's last call open for 10 minutes (its default is 30 s): a rendezvous that
# waits for it cannot pass, and one that does not has time to start on a loaded machine.
LAST_CALL_S = 600
FORMED_WITHIN_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(envs: list[dict], script) -> list[str]:
    """One torchrun agent per pod, as the pod's command would start it, all on this host: the
    rendezvous endpoint moves to 127.0.0.1 (the test cluster's nodes are not hosts), the rest of
    the platform's variables are kept. Returns each agent's output."""
    port = free_port()
    procs = []
    for env in envs:
        env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
               "PET_RDZV_CONF": f"last_call_timeout={LAST_CALL_S}", "PATH": "/usr/bin:/bin", "PYTHONWARNINGS": "ignore"}
        procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", str(script)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        return [p.communicate(timeout=FORMED_WITHIN_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()


def test_torchrun_forms_the_group_at_each_size_the_platform_starts(alice, bob, cycle, reports, sent, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    job = running_borrower(bob, cycle, reports, sent)
    outputs = torchrun(list(starts(sent, job).values()), script)
    assert all("world=2 sum=3" in out for out in outputs), outputs

    # The lender takes a node back: the kept worker starts again alone, below the job's maximum.
    reclaim_one_node(alice, cycle, sent)
    first, second = current(job)
    sent.clear()
    reports(report(first, "Failed", exit_code=143, reason="Resize"), report(second, "Failed", exit_code=143, reason="Shrunk"))
    (env,) = starts(sent, job).values()
    assert (env["WORLD_SIZE"], env["OPENDLC_ELASTIC_MIN"], env["OPENDLC_ELASTIC_MAX"]) == ("1", "1", "2")
    (output,) = torchrun([env], script)
    assert "world=1 sum=1" in output, output
