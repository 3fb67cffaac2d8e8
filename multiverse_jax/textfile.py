"""Reading the user's input files: one reader and one integer parser for every importer.

Errors are :class:`InputError`s naming the file (and the line, where there is one):

* ``read_bytes`` / ``read_text`` / ``read_lines``: a missing or unreadable file, text that
  is not UTF-8 (a leading byte-order mark is dropped). Lines are split on ``\\n`` only, so
  line numbers match editors, and a trailing ``\\r`` (CRLF files) is dropped.
* ``parse_int``: a field that is not an integer, is below its minimum or does not fit in
  64 bits. Accepted: an optional sign and decimal digits (``42``, ``-1``), or an integral
  number in decimal or exponent notation (``1e6``, ``2.5e3``, ``100.0``) -- the union of
  what the importers accepted before they shared this parser.
"""

from __future__ import annotations

import decimal
import os

from multiverse_jax.errors import InputError

INT64_MAX = 2**63 - 1


def read_bytes(path, what: str) -> bytes:
    """The file's bytes; ``what`` names the file in errors (e.g. "GOAL file")."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{what} not found", source=str(source)) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", source=str(source)) from None


def read_text(path, what: str) -> str:
    """The file's text (UTF-8, a leading byte-order mark dropped)."""
    raw = read_bytes(path, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError("not a text file (invalid UTF-8)", source=str(os.fspath(path)), line=line) from None


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` (numbered as editors number them), a trailing ``\\r`` dropped."""
    return [line.rstrip("\r") for line in text.split("\n")]


def read_lines(path, what: str) -> list[str]:
    """``split_lines(read_text(path, what))``: line k of the file is item k - 1."""
    return split_lines(read_text(path, what))


def parse_int(text: str, what: str, source: str, line: int | None, *, minimum: int | None = None) -> int:
    """The integer field ``text`` (``what`` names it in errors), at least ``minimum``, 64-bit."""
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value != value.to_integral_value():
        raise InputError(f"{what}: expected an integer, got {text!r}", source=source, line=line)
    if minimum is not None and value < minimum:
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise InputError(f"{what} must be {bound}, got {text}", source=source, line=line)
    if value > INT64_MAX:
        raise InputError(f"{what}: {text} does not fit in 64 bits (at most {INT64_MAX})", source=source, line=line)
    return int(value)
