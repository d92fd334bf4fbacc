from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from jobs import agents
from quotas.models import Quota


class Command(BaseCommand):
    help = ("Register a node (or, with --simulated, the simulated agent) and print its agent's join token, "
            "shown only now; registering again issues a new token and the old one stops working.")

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", default="", help="The node's name, as its agent's --node.")
        parser.add_argument("--simulated", action="store_true", help="The simulated agent's credential.")
        parser.add_argument("--quota", default="", help="Quota (QuotaId or name) the node joins; default: the public pool.")
        parser.add_argument("--token-file", default="", help="Write the token to this file (mode 0600) instead of printing it.")

    def handle(self, *args, name, simulated, quota, token_file, **options):
        if simulated == bool(name):
            raise CommandError("give a node NAME, or --simulated for the simulated agent")
        try:
            token = agents.register(agents.SIMULATED if simulated else name, _quota(quota))
        except agents.NotRegistrable as exc:
            raise CommandError(str(exc)) from None
        if token_file:
            agents.write_token_file(token_file, token)
            self.stdout.write(f"join token of {name or 'the simulated agent'} written to {token_file}")
        else:
            self.stdout.write(f"OPENDLC_AGENT_TOKEN={token}")


def _quota(ref: str) -> Quota | None:
    if not ref:
        return None
    found = list(Quota.objects.filter(Q(quota_id=ref) | Q(name=ref))[:2])
    if len(found) != 1:
        raise CommandError(f"--quota: {'no quota' if not found else 'more than one quota'} has QuotaId or name "
                           f"{ref!r}; give its QuotaId")
    return found[0]
