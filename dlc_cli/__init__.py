"""`dlc`, OpenDLC's command line. It speaks only the public API through the official PAI SDKs, so it
works against OpenDLC and PAI-DLC alike, and imports nothing of the server (import-linter keeps it)."""
