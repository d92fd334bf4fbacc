from django.conf import settings
from django.core.management.base import BaseCommand

from console import demo
from jobs.agents import write_token_file


class Command(BaseCommand):
    help = ("Create the demo tenant, workspaces, quotas, nodes and users (once), and the join tokens of the "
            "Procfile's agents (whenever one is missing). Alice's AccessKey secret is printed only to a "
            "terminal; otherwise it is written to a file readable by its owner only.")

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
        self.show_access_key(result)

    def show_access_key(self, result) -> None:
        """The secret goes to the person at the terminal, never into output that a redirect or a
        process manager may keep as the services' log."""
        lines = [f"ALIBABA_CLOUD_ACCESS_KEY_ID={result.access_key_id}",
                 f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={result.access_key_secret}",
                 f"OPENDLC_WORKSPACE_ID={result.workspace_id}"]
        if self.stdout.isatty():
            self.stdout.write("AccessKey for alice (shown once):")
            for line in lines:
                self.stdout.write(line)
            return
        path = settings.VAR_DIR / "demo-access-key.env"
        write_token_file(path, "\n".join(lines))
        self.stdout.write(f"AccessKey for alice: {result.access_key_id}; its secret is in {path} (readable by you "
                          "only), not in this output, which is not a terminal.")
