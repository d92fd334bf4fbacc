"""gunicorn's settings for the web process; the Procfile and docker-compose.yml start it with `-c`.

gunicorn's HTTP parser answers a request it will not pass on with a plain-text 400, 414 or 431 of
its own, which the SDK cannot read. So its request line takes the most gunicorn allows, and Django,
which answers in the SDK's JSON shape (apikit), does the refusing: a body over 2.5 MiB
(DATA_UPLOAD_MAX_MEMORY_SIZE), more than 1,000 query fields, a NUL anywhere. Only a request line
over 8,190 bytes, or headers past gunicorn's defaults (100 of 8,190 bytes each), which no SDK
request comes near, still get gunicorn's own answer.
"""

limit_request_line = 8190  # the most gunicorn takes (its default is 4,094)
limit_request_fields = 100
limit_request_field_size = 8190


def post_worker_init(worker):
    """Once a worker has loaded the application: load the views too (Django imports them at the first
    request), then freeze all of it out of the garbage collector's scans, as the Celery workers do."""
    from django.urls import get_resolver

    from console import collector

    get_resolver().url_patterns  # noqa: B018 - imports every view module
    collector.tune()
