import os
import sys

from django.core.wsgi import get_wsgi_application

from console.config import ConfigError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
try:
    application = get_wsgi_application()
except ConfigError as exc:
    sys.exit(f"opendlc: configuration error: {exc}")
