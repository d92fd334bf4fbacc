from django.conf import settings
from django.core.management.base import BaseCommand

from console import demo


class Command(BaseCommand):
    help = ("Create the demo tenant, workspaces, quotas, nodes and users (once), and the join tokens of the "
            "Procfile's agents (whenever one is missing).")

    def handle(self, *args, **options):
        tokens = settings.VAR_DIR / "agents"
        for name in demo.agent_tokens(tokens):
            self.stdout.write(f"Registered agent {name}; its join token is in {tokens / name}.token")
        result = demo.seed()
        if not result.created:
            self.stdout.write("Demo data already present; nothing to do.")
            return
        jobs = demo.seed_jobs()
        self.stdout.write(self.style.SUCCESS(f"Seeded the demo cluster and {len(jobs)} jobs on its simulated nodes."))
        self.stdout.write(f"Users alice (owner, admin), bob (member), charlie (no access); password: {demo.DEMO_PASSWORD}")
        self.stdout.write("AccessKey for alice (shown once):")
        self.stdout.write(f"ALIBABA_CLOUD_ACCESS_KEY_ID={result.access_key_id}")
        self.stdout.write(f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={result.access_key_secret}")
        self.stdout.write(f"OPENDLC_WORKSPACE_ID={result.workspace_id}")
