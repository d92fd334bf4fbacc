from django.apps import AppConfig


class ApikitConfig(AppConfig):
    name = "apikit"
    # The AccessKey and nonce tables and their migrations were made when this lived in the console
    # app; keeping its label keeps existing databases as they are.
    label = "console"
    verbose_name = "API access"
