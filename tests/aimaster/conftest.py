"""Builders for jobs with fault tolerance. The jobs tests' autouse fixtures (nothing leaves the
process) are imported by the modules that want them, not here: the end-to-end test sends for real."""

import pytest

from jobs.services import create_job
from tests.jobs.conftest import cycle, make_request, report, reports  # noqa: F401


@pytest.fixture
def running(bob, cycle, reports):  # noqa: F811
    """running(pods=2, **JobRequest fields) -> a job with fault tolerance on, all pods Running."""

    def make(pods=1, **kw):
        kw.setdefault("ft_enabled", True)
        job = create_job(bob, make_request(pods=pods, **kw))
        cycle()
        reports(*(report(p, "Running") for p in job.pods.all()))
        job.refresh_from_db()
        assert job.status == "Running", job.wait_reason
        return job

    return make
