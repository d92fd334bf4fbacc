"""manage.py replay_trace on a 50-job slice of the Philly trace writes its JSON and HTML."""

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
PHILLY_JOBS, PHILLY_NODES = DATA / "philly_jobs.csv", DATA / "philly_vc_nodes.csv"


@pytest.mark.skipif(not PHILLY_JOBS.exists(), reason="the shared Philly trace is not here")
def test_the_command_writes_the_json_summary_and_the_html_report(tmp_path, capsys):
    out = tmp_path / "replay"
    call_command("replay_trace", jobs=str(PHILLY_JOBS), nodes=str(PHILLY_NODES), policy="all",
                 ckpt_minutes=30, out=str(out), limit=50, no_progress=True)
    summary = json.loads((out / "summary.json").read_text())
    assert [p["policy"] for p in summary["policies"]] == ["strict", "borrow", "borrow-ckpt"]
    strict = summary["policies"][0]
    assert strict["jobs_replayed"] + strict["jobs_skipped"] == 50
    assert set(strict["queueing_delay_s"]) == {"mean", "median", "p95", "max"}
    page = (out / "report.html").read_text()
    assert "Queueing delay CDF" in page and "GPU utilization over time" in page
    assert "Preemptions and GPU-hours lost" in page and "3,760.6" in page
    assert "<script src=" not in page and "plotly.js v" in page  # plotly.js inlined, no CDN
    assert "strict" in capsys.readouterr().out


def test_the_command_says_which_file_it_cannot_read(tmp_path):
    with pytest.raises(CommandError, match="Cannot read the trace"):
        call_command("replay_trace", jobs=str(tmp_path / "missing.csv"),
                     nodes=str(tmp_path / "missing_vcs.csv"), out=str(tmp_path), no_progress=True)
