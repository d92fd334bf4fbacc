from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console_site"  # "console" is the API access tables' label (apikit/apps.py)
    verbose_name = "Console"
