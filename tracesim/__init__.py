"""Trace replay: drives the real `scheduler.plan` in virtual time over a job trace.

Pure Python, no Django (like `scheduler/`): `manage.py replay_trace` is a thin wrapper.

    trace.read_trace(jobs_csv, nodes_csv)  -> Trace (jobs in arrival order, virtual clusters)
    engine.replay(trace, policy, ...)      -> Result (per-job times, utilization steps, losses)
    metrics.summary(result)                -> the JSON summary of one policy
    report.write_html(results, path)       -> a self-contained HTML report (Plotly)
"""

from .engine import POLICIES, replay
from .trace import read_trace

__all__ = ["POLICIES", "replay", "read_trace"]
