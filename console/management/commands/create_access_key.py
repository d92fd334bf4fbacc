from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apikit.models import AccessKey
from quotas.models import Membership


class Command(BaseCommand):
    help = "Create an AccessKey pair for USERNAME and print it (the secret is shown only now)."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"username: no user named {username!r}") from None
        key, secret = AccessKey.issue(user)
        membership = Membership.objects.filter(user=user).order_by("-is_default", "pk").first()
        self.stdout.write(f"ALIBABA_CLOUD_ACCESS_KEY_ID={key.access_key_id}")
        self.stdout.write(f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={secret}")
        self.stdout.write(f"OPENDLC_WORKSPACE_ID={membership.workspace_id if membership else ''}")
