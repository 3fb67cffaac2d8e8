"""Reading a workload text file with errors that name it (missing, unreadable, not UTF-8)."""

from __future__ import annotations

from multiverse_jax.errors import InputError


def read_text(path: str, what: str) -> str:
    """The file's text; ``what`` names it in errors (e.g. "GOAL file")."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise InputError(f"{what} not found", source=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", source=path) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("not a text file (invalid UTF-8)", source=path, line=raw[: exc.start].count(b"\n") + 1) from None
