"""The searches of job names and ids read their trigram indexes (jobs/migrations/0018): without them a
search reads every job of its time window to test its name."""

import pytest
from django.db import connection
from django.http import QueryDict
from django.test import RequestFactory

from api.jobs import _filtered_jobs
from console.pages.jobs import filtered_jobs
from quotas.models import Workspace
from tests.pg_plans import plans_of, reads

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_trgm is PostgreSQL's")


def test_list_jobs_display_name_search_reads_the_name_trigram_index(alice):
    jobs = _filtered_jobs(alice, QueryDict("DisplayName=resnet&Status=Succeeded"))
    plan = plans_of(lambda: list(jobs.order_by("-created_at")[:50]), "job_display_name_trgm")
    assert reads(plan, "job_display_name_trgm") and "~~ '%RESNET%'" in plan, plan


def test_the_console_search_reads_both_trigram_indexes(alice):
    request = RequestFactory().get("/jobs", {"q": "resnet"})
    request.user = alice
    jobs, _ = filtered_jobs(request, Workspace.objects.get(name="ml-research"))
    plan = plans_of(lambda: list(jobs.order_by("-created_at")[:50]), "job_display_name_trgm", "job_job_id_trgm")
    assert reads(plan, "job_display_name_trgm") and reads(plan, "job_job_id_trgm"), plan
