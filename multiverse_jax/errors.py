"""Errors a user can cause, with the place (file, line, field) that caused them."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: a config key, a file line or an API argument.

    The message always names where the problem is (``source`` and, for files, ``line``)
    and what would be valid.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        self.message = message  # without the place
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(where + message)
