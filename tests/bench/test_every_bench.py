"""Every benchmark in bench/ runs in the suite at a tiny scale, so that none breaks unseen.

Most run in-process where their figures are checked (tests/bench/, tests/agent/test_faults.py);
the rest run here as a user runs them, a script in a process of its own with tiny arguments, and
must exit 0 and print their figures. A new benchmark fails the first test until it is given one.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Run in-process by these tests, with their figures checked.
IN_PROCESS = {
    "admission_throughput": "tests/bench/test_smoke.py", "create_job": "tests/bench/test_smoke.py",
    "kueue_baseline": "tests/bench/test_smoke.py", "reclaim_latency": "tests/bench/test_smoke.py",
    "spot_market": "tests/bench/test_spot_market.py", "usage_page": "tests/bench/test_usage_page.py",
    "console_pages": "tests/bench/test_console_pages.py", "chaos": "tests/agent/test_faults.py",
    # It runs the suite's own EasyCkpt tests and the GPU paths, which need a lent GPU machine.
    "device_check": "by hand on a GPU machine (README, device check)",
}
# Run here: arguments that make each a few seconds, and a line its output must have.
AS_SCRIPTS = {
    "api_latency": (["--jobs", "300", "--clients", "2", "--calls", "3"], "ListJobs, filtered"),
    "checkpoint_stall": (["--size-mib", "4", "--tensors", "2", "--runs", "2", "--compute-ms", "5"], "stall, save() + wait"),
    "cycle_profile": (["--waiting", "40", "--nodes", "10", "--cycles", "2", "--top", "3"], "submitted 40 jobs"),
    # Real process agents and training processes: two nodes, one lender job (seed 7), a short run of
    # each borrower: long enough for each to be preempted once and take the node back.
    "goodput": (["--nodes", "2", "--seconds", "14", "--lender-every", "4", "--lender-run", "4", "5"], "elastic "),
    "scheduler_core": (["--scales", "1", "--repeat", "1"], "1x"),
    "start_estimate": (["--waiting", "20", "--quotas", "2", "--nodes", "3", "--repeat", "1"], "large:"),
}
NOT_BENCHMARKS = {"__init__", "harness"}


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.stem for p in BENCH.glob("*.py")} - NOT_BENCHMARKS
    assert scripts - IN_PROCESS.keys() - AS_SCRIPTS.keys() == set(), "give the new benchmark a run in the suite"
    assert (IN_PROCESS.keys() | AS_SCRIPTS.keys()) <= scripts  # no entry for a benchmark that is gone


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(AS_SCRIPTS))
def test_the_benchmark_runs_as_a_script_and_prints_its_figures(name, tmp_path):
    args, expected = AS_SCRIPTS[name]
    # A database of its own (bench/harness.py configure): PostgreSQL when the suite runs on it.
    env = {**os.environ, "OPENDLC_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-3000:]
