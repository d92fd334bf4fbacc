"""The scheduler core is pure Python: importing it loads no Django, Celery or project app."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_PREFIXES = ("django", "celery", "kombu", "rest_framework", "console", "quotas", "jobs",
                      "spot", "agent", "easyckpt")


def test_importing_scheduler_pulls_in_no_django_celery_or_app_module():
    code = ("import json, sys, scheduler, scheduler.plan; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    loaded = json.loads(out)
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN_PREFIXES]
    assert bad == []
    assert "scheduler.plan" in loaded
