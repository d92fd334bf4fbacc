from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "Notifications"

    def ready(self):
        from jobs.history import transitions_recorded
        from notify import services

        transitions_recorded.connect(services.on_transitions, dispatch_uid="notify.on_transitions")
