"""Serve plotly.js from the installed `plotly` package instead of keeping a 4.8 MB copy in git.

The console needs no CDN: `{% static 'console/vendor/plotly.min.js' %}` resolves to the file the
pinned plotly wheel ships, so the chart library always matches the Python package.
"""

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

URL_PATH = "console/vendor/plotly.min.js"
PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"


class _PrefixedStorage(FileSystemStorage):
    prefix = "console/vendor"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = _PrefixedStorage(location=str(PACKAGE_DATA))

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != URL_PATH:
            return [] if find_all else None
        found = str(PACKAGE_DATA / "plotly.min.js")
        return [found] if find_all else found

    def list(self, ignore_patterns):
        yield "plotly.min.js", self.storage
