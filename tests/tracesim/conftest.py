import csv

import pytest


@pytest.fixture
def write_trace(tmp_path):
    """Write a tiny trace: jobs as dicts (timestamp in seconds), VCs as {name: nodes}."""

    def write(jobs: list[dict], vcs: dict[str, int]) -> tuple[str, str]:
        jobs_csv, nodes_csv = tmp_path / "jobs.csv", tmp_path / "vcs.csv"
        columns = ["timestamp", "duration", "num_gpus", "cluster"]
        columns += sorted({k for j in jobs for k in j} - set(columns))
        with open(jobs_csv, "w", newline="") as f:
            out = csv.DictWriter(f, columns)
            out.writeheader()
            out.writerows(jobs)
        with open(nodes_csv, "w", newline="") as f:
            f.write("vc,node num\n" + "".join(f"{vc},{n}\n" for vc, n in vcs.items()))
        return str(jobs_csv), str(nodes_csv)

    return write


def job(at, duration, gpus, vc, **extra) -> dict:
    return {"timestamp": at, "duration": duration, "num_gpus": gpus, "cluster": vc, **extra}
