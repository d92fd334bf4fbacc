from django.apps import AppConfig


class CycleConfig(AppConfig):
    name = "cycle"
    verbose_name = "Schedule cycle"
