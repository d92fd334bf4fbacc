#!/usr/bin/env python
"""Django's command-line utility for OpenDLC."""

import os
import sys

# Commands that work without a reachable database or broker.
OFFLINE_COMMANDS = {
    "help", "--help", "-h", "version", "--version", "makemigrations", "check", "collectstatic", "shell",
    "replay_trace",  # drives the pure scheduler in virtual time; needs neither database nor broker
}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    if sys.argv[1:2] == ["agent"]:
        os.environ["OPENDLC_PROCESS_ROLE"] = "agent"
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
