import subprocess
import sys
from pathlib import Path

PURE_MODULES = ["spot.market", "spot.pricesource", "spot.inventory", "spot.bids", "spot.billing"]
ROOT = Path(__file__).resolve().parents[2]


def test_the_market_modules_import_no_django_or_celery():
    code = (
        f"import sys\nfor m in {PURE_MODULES!r}: __import__(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'kombu', 'rest_framework'))\n"
        "print(','.join(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
