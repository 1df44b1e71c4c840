"""The base of every party-side error whose message is safe to show a user.

Messages name the problem (file, row, field, parameter) and never contain record values, secrets,
filters or segments; the CLIs print them without a traceback and exit with status 2.
"""


class PprlError(Exception):
    """A user-facing error with a message that is safe to print and log."""
