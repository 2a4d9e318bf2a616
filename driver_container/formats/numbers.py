"""The one strict parser of numbers read from hosts, images, the environment and the API server.

Python's ``str.isdigit`` is true for ``"²"`` (then ``int()`` raises) and ``int()`` itself accepts
``"٣"``, ``" 7 "`` and ``"1_000"``; none of those is a number the kernel, a daemon or an HTTP server
writes. So every numeric field goes through here: ASCII digits only, a bounded length (a 4 KiB digit
string must not become a 13 000-digit integer), no sign unless asked for, no blanks, no underscores.
The parsers return None for anything else; the caller decides whether that is an error or a skip.
``is_ascii_name`` is the same care for names (os-release keys, fabricmanager.cfg fields, NVFM_CONFIG_*):
``str.isidentifier`` alone accepts ``"É"``.
"""

from __future__ import annotations

MAX_DIGITS = 20  # 2**64 has 20 decimal digits: enough for any kernel or protocol field read here

_DIGITS = {
    2: "01",
    8: "01234567",
    10: "0123456789",
    16: "0123456789abcdefABCDEF",
}
_PREFIXES = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}
MAX_FRACTION_DIGITS = 9  # nanoseconds


def parse_uint(text: str, *, base: int = 10, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a non-negative integer in ``base`` (2, 8, 10, 16), or None when it is not exactly
    1..max_digits ASCII digits of that base."""
    allowed = _DIGITS[base]
    if not 0 < len(text) <= max_digits or any(ch not in allowed for ch in text):
        return None
    return int(text, base)


def parse_int(text: str, *, max_digits: int = MAX_DIGITS) -> int | None:
    """A decimal integer with an optional leading ``-`` or ``+`` (``/proc/modules`` refcounts)."""
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in ("-", "+") else text
    value = parse_uint(body, max_digits=max_digits)
    return None if value is None else sign * value


def parse_c_int(text: str, *, max_digits: int = MAX_DIGITS) -> int | None:
    """An integer as C's ``strtol(..., 0)`` and ``int(text, 0)`` read it: ``0x``/``0o``/``0b`` prefixes,
    an optional sign, otherwise decimal (module parameter values)."""
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in ("-", "+") else text
    base = _PREFIXES.get(body[:2])
    value = parse_uint(body[2:], base=base, max_digits=max_digits) if base else parse_uint(body, max_digits=max_digits)
    return None if value is None else sign * value


def parse_decimal_seconds(text: str) -> float | None:
    """``12`` or ``1.5``: a non-negative, finite number of seconds (no exponent, ``inf`` or ``nan``)."""
    # No regular expression: this module is imported by the liveness probe's glance, and ``re`` alone
    # costs a bare interpreter start's worth of time (lifecycle/peermem_glance.py).
    whole, dot, fraction = text.partition(".")
    if parse_uint(whole) is None or (dot and parse_uint(fraction, max_digits=MAX_FRACTION_DIGITS) is None):
        return None
    return float(text)


def driver_branch(version: str | None) -> int | None:
    """The branch of an NVIDIA driver version (``580`` of ``580.178.04``); None when it does not start with one."""
    return parse_uint((version or "").split(".", 1)[0])


def is_ascii_name(text: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``: a shell variable or config field name (no regex: read on every start)."""
    return text.isascii() and text.isidentifier()
