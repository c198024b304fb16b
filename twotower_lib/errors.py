"""User-facing errors.

A `UserError` says what was wrong, where, and what to do; the CLI prints it without a
traceback and exits non-zero. Anything else that escapes is a bug and keeps its traceback.
It subclasses ValueError so callers that catch bad input generically still catch it.
"""


class UserError(ValueError):
    """Bad input or a missing prerequisite that the user can fix."""


class MissingDependencyError(UserError, ImportError):
    """An optional package or model is not installed; the message says how to install it."""
