"""Fault injection, bench/chaos.py at a small scale: the scheduler worker, the platform worker, the
simulated agent, beat and (on Redis) the broker's connections are killed while jobs run; every job
still ends, and no GPU is ever held by two pods at once.

The killed services are started again at once, as deploy/respawn.py and docker-compose's restart
policy do. The simulated agent keeps nothing across its restart, so AIMaster requeues the jobs whose
pods it lost (jobs/nodes.py reclaim_orphans), and a start it took with it is sent again
(jobs/dispatch.py resend_unstarted).
"""

import pytest
from django.conf import settings

from bench import chaos, harness

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def services(transactional_db, settings, tmp_path):
    with harness.Services.for_test(tmp_path, settings) as s:
        yield s


def test_jobs_end_and_no_gpu_is_held_twice_through_worker_agent_beat_and_broker_faults(services):
    broker = chaos.cut_broker_connections if settings.REDIS_URL else None
    r = chaos.run(services, jobs=24, nodes=2, every_s=2, broker=broker, visibility_s=5, timeout_s=120)

    assert (r["finished"], r["succeeded"], r["stuck"]) == (24, 24, 0), services.logs()
    assert r["samples"] > 10 and r["double_booked"] == 0
    kinds = {"scheduler", "platform", "simagent", "beat"} | ({"broker"} if broker else set())
    assert {f.name for f in r["faults"]} == kinds  # every kind of fault happened, and the cluster recovered
    assert all(f.recovered_s is not None for f in r["faults"][:-1])
    # The agent's restart cost some jobs a pod: AIMaster ran them again.
    assert r["restarted_jobs"] >= 1
