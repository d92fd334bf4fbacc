"""The seed script under the SDK version it was written for (alibabacloud_pai_dlc20201203 1.4.17)."""

import subprocess
from pathlib import Path

import pytest

from tests.api.test_sdk_jobs import run_seed

VENV = Path("/tmp/sdk1417")
PYTHON = VENV / "bin" / "python"
PIN = "alibabacloud_pai_dlc20201203==1.4.17"


def _has_sdk() -> bool:
    check = [str(PYTHON), "-c", "import importlib.metadata as m; assert m.version('alibabacloud_pai_dlc20201203') == '1.4.17'"]
    return PYTHON.exists() and subprocess.run(check, capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def sdk1417_python() -> str:
    """A venv with the 1.4.17 SDK: reused when present, otherwise created (CI reaches PyPI)."""
    if not _has_sdk():
        try:
            subprocess.run(["python3.11", "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=120)
            subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", PIN], check=True, capture_output=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot install {PIN} into {VENV}: {exc}")
    if not _has_sdk():
        pytest.skip(f"{VENV} does not hold {PIN}")
    return str(PYTHON)


def test_the_seed_script_runs_unchanged_under_sdk_1_4_17(sdk1417_python, endpoint, alice_key, alice_dlc, research):
    from alibabacloud_pai_dlc20201203 import models as dlc

    job_id = run_seed("spot_discount_limit.py", endpoint, alice_key, research, python=sdk1417_python)
    spec = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body.job_specs[0]
    assert (spec.ecs_spec, spec.spot_spec.spot_discount_limit) == ("ecs.g7.xlarge", 0.4)
