"""Errors that end in one clear line for the user."""


class InputError(Exception):
    """Bad input: a wrong DSN, a malformed config or profile, an impossible size.

    The message is one line saying what is wrong and what to do; the CLI exits with 2."""

    exit_code = 2
