#!/usr/bin/env python
"""Django's command-line utility for OpenDLC."""

import os
import sys

# Commands that work without a reachable database or broker.
OFFLINE_COMMANDS = {
    "help", "--help", "-h", "version", "--version", "makemigrations", "check", "collectstatic", "shell",
    "replay_trace",  # drives the pure scheduler in virtual time; needs neither database nor broker
}


# What only the platform holds: an agent runs next to users' pods, which must not find them in it.
PLATFORM_SECRETS = ("SECRET_KEY", "DATABASE_URL", "OPENDLC_ENCRYPTION_KEY")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    if sys.argv[1:2] == ["agent"]:
        os.environ["OPENDLC_PROCESS_ROLE"] = "agent"
        if given := [name for name in PLATFORM_SECRETS if name in os.environ]:
            # Start again without them: unsetting a variable leaves it in /proc/<pid>/environ.
            print(f"opendlc: agent: ignoring {', '.join(given)}: an agent needs only the broker", file=sys.stderr)
            clean = {k: v for k, v in os.environ.items() if k not in PLATFORM_SECRETS}
            os.execve(sys.executable, [sys.executable, *sys.argv], clean)
    from console.config import ConfigError, check_services

    try:
        import django

        django.setup()
        if len(sys.argv) > 1 and sys.argv[1] not in OFFLINE_COMMANDS:
            check_services()
    except ConfigError as exc:
        sys.exit(f"opendlc: configuration error: {exc}")

    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
