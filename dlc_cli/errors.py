"""The one failure type the CLI reports itself, in one line with exit status 1."""


class Failure(Exception):
    """A runtime failure that is not the API's answer: no configuration, no pod to read, ..."""
