"""What a bug report must never carry (pure): secret-looking values, and the kernel command line's
arguments beyond the few NVIDIA support asks for.

``bug-report`` never reads a service-account token, a kubeconfig or the environment beyond an
allow-list; this is the second line: every byte of the archive passes ``redact`` before it is written,
so a secret that reached a file or a kernel record it copies is replaced, and counted in the index.

The kernel command line's copies are reduced to the arguments NVIDIA support needs, in every shape
they arrive in (formats/cmdline_redact.py): on Talos that line carries the machine config's source with
its credentials (siderolabs/talos pkg/machinery/constants/constants.go @
ad8823176e75b9cd07647ddde13c34f2ab77c663: ``talos.config`` (a URL), ``talos.config.inline``/
``talos.config.early`` (the config itself, zstd and base64: tokens, CA keys),
``talos.config.oauth.client_secret`` and the other ``talos.config.auth.*`` arguments,
``talos.environment`` (proxy URLs), ``siderolink.api`` (Omni's ``jointoken``)).

A signed URL carries its credential in its query: AWS S3 presigned URLs ``X-Amz-Signature`` (and
``X-Amz-Credential``, ``X-Amz-Security-Token``), Google Cloud Storage ``X-Goog-Signature`` (and
``X-Goog-Credential``), Azure SAS ``sig``, CloudFront and older S3 ``Signature``. Talos logs the URL it
fetches its machine config from to the kernel log ("fetching machine config from: %q",
siderolabs/talos internal/app/machined/pkg/runtime/v1alpha1/platform/metal/metal.go @
ad8823176e75b9cd07647ddde13c34f2ab77c663), where nvidia-bug-report.sh's dmesg copies it from: a query
parameter named ``sig`` or ``...signature`` has its value replaced wherever it appears.

Every pattern is linear in its input: each can start only where a run of its characters starts (a
look-behind excludes the middle of one) and is tried once there, so a crafted member of a few MiB is
redacted in well under a second instead of hours (a ``name=`` pattern starting at every letter of one
long word was quadratic).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from driver_container.formats.cmdline_redact import (
    KERNEL_RECORD,
    REDACTED,
    reduce_kernel_record,
    reduce_script_sections,
)

# An environment variable whose name says it holds a secret.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|CERT|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
# A name (of a key=value, key: value, JSON "key": "value", --key value) whose value is secret ("session"
# only as a session id: nvidia-smi's "Active Sessions : 0" is a fact).
_SECRET_WORD = re.compile(
    rb"token|secret|passw(?:or)?d|passphrase|credential|key|auth|bearer|cookie|sess(?:ion)?[-_]?(?:id|key)|private",
    re.IGNORECASE,
)
# Names that contain such a word and are facts, not secrets: modinfo's signer's key id and author.
_HARMLESS_NAMES = frozenset({b"sig_key", b"author"})
_NAME = rb"(?<![\w.\-])(?P<name>[\w.\-]+)"
# name=value (query strings, kernel and shell command lines, env dumps; %3D: the same URL-encoded).
_ASSIGNED = re.compile(_NAME + rb"(?P<sep>[ \t]*(?:=|%3[dD])[ \t]*)")
# name: value (YAML, HTTP headers, "key: value" text) and JSON "name": "value".
_LABELLED = re.compile(_NAME + rb"(?P<sep>(?:\\?\")?[ \t]*:[ \t]*)")
# --name value (a command line in a log).
_OPTION = re.compile(rb"(?<![\w.\-])--?(?P<name>[\w.\-]+)(?P<sep>[ \t]+)")
# A value: quoted (also with the quotes escaped, as inside a JSON string), a quote that does not close
# on its line (then the rest of the line), a bare word, or, after "name:", the rest of the line or of
# the JSON string it is in.
_QUOTED = re.compile(rb"\"(?P<a>(?:[^\"\\\n]|\\.)*)\"|\\\"(?P<b>(?:[^\"\\\n]|\\[^\"\n])*)\\\"|'(?P<c>[^'\n]*)'")
_QUOTES = (b'"', b"'", b"\\")
_UNCLOSED = re.compile(rb"\\?[\"'](?P<a>[^\r\n]*)")
_BARE = re.compile(rb"[^\s&\"',;<>\\]+")
_REST_OF_LINE = re.compile(rb"(?:[^\r\n\"\\]|\\[^nr\"\\\n])*[^\s\"\\]")
_BLOB_LEN = 40
# A signed URL's query signature: "?sig=", "&X-Amz-Signature=", "&Signature=", also URL-encoded
# (%26, %3F, %3D), HTML-escaped (&amp;) or JSON-escaped (\u0026) where a URL sits inside another.
_QUERY_SIGNATURE = re.compile(
    rb"(?i)(?:[?&;]|%26|%3f|\\u0026)(?:sig|[\w.\-]*signature)(?:=|%3d)(?P<value>[^\s&#\"'<>\\]+)"
)
_VALUE_PATTERNS: tuple[re.Pattern[bytes], ...] = (
    # URL userinfo: scheme://user:password@host.
    re.compile(rb"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://(?P<value>[^\s/?#@\"'<>]+)@"),
    # HTTP authorisation schemes as they appear in a header or a curl line.
    re.compile(rb"(?i)\b(?:bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})"),
    # A JSON Web Token anywhere (a service-account token is one).
    re.compile(rb"(?<![A-Za-z0-9_-])(?P<value>eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"),
    # A PASETO token (v1-v4, local or public: Omni's and Talos' signed tokens).
    re.compile(rb"(?<![\w.])(?P<value>v[1-4]\.(?:local|public)\.[A-Za-z0-9_-]{16,}(?:\.[A-Za-z0-9_-]+)?)"),
    # A PEM private key's body (its BEGIN line is kept: what kind of key was there).
    re.compile(rb"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?P<value>[A-Za-z0-9+/=\s:,]*)"),
    _QUERY_SIGNATURE,
)
# A base64 blob's neighbouring characters change class (upper, lower, digit, + or /) about 64% of the
# time; of random 40-character blobs, a few in a thousand have fewer than 40% (or lack a digit).
BLOB_MIN_CHANGES = 0.4
_CHAR_CLASS = re.compile(rb"[A-Z]+|[a-z]+|[0-9]+|[^A-Za-z0-9]+")
_UPPER, _LOWER, _DIGIT = re.compile(rb"[A-Z]"), re.compile(rb"[a-z]"), re.compile(rb"[0-9]")
_BLOB = re.compile(rb"(?<![A-Za-z0-9+/])(?P<value>[A-Za-z0-9+/]{%d,}=*)" % _BLOB_LEN)


def looks_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def redact(data: bytes) -> tuple[bytes, int]:
    """``data`` with every secret-looking value replaced by ``<redacted>``, every command line reduced
    to ``command_line_facts``, and how many values and arguments were."""
    total = 0
    data, count = reduce_script_sections(data)
    total += count
    data, count = _sub(KERNEL_RECORD, data, reduce_kernel_record)
    total += count
    for pattern in (_ASSIGNED, _LABELLED, _OPTION):
        data, count = _named_values(pattern, data)
        total += count
    for pattern in _VALUE_PATTERNS:
        data, count = _sub(pattern, data, _whole_value)
        total += count
    data, count = _sub(_BLOB, data, _blob)
    return data, total + count


Replacer = Callable[[re.Match[bytes]], tuple[bytes, int]]


def _sub(pattern: re.Pattern[bytes], data: bytes, replace: Replacer) -> tuple[bytes, int]:
    total = 0

    def one(match: re.Match[bytes]) -> bytes:
        nonlocal total
        text, count = replace(match)
        total += count
        return text

    return pattern.sub(one, data), total


def _spliced(match: re.Match[bytes], start: int, end: int, value: bytes) -> bytes:
    """The match's text with ``[start, end)`` (offsets into the subject) replaced by ``value``."""
    base = match.start()
    text = match.group(0)
    return text[: start - base] + value + text[end - base :]


def _whole_value(match: re.Match[bytes]) -> tuple[bytes, int]:
    if match.group("value") in (b"", REDACTED):
        return match.group(0), 0
    return _spliced(match, match.start("value"), match.end("value"), REDACTED), 1


def _blob(match: re.Match[bytes]) -> tuple[bytes, int]:
    """A long base64 run (a config, a key) with upper- and lower-case letters and digits that change
    class as often as random text does: between about 64% of neighbours in base64, under 20% inside a
    path's names or a word (lower-case hex digests lack the upper case)."""
    value = match.group("value")
    if not (_UPPER.search(value) and _LOWER.search(value) and _DIGIT.search(value)):
        return value, 0
    pairs = changes = 0
    for part in value.rstrip(b"=").split(b"/"):
        classes = _CHAR_CLASS.findall(part)
        pairs += max(len(part) - 1, 0)
        changes += max(len(classes) - 1, 0)
    if changes < BLOB_MIN_CHANGES * pairs:
        return value, 0
    return REDACTED, 1


def _named_values(pattern: re.Pattern[bytes], data: bytes) -> tuple[bytes, int]:
    """Each value that a secret-looking name sets replaced; the scan goes on right after the name, so a
    ``jointoken=`` inside a URL that a harmless name sets is still found."""
    out: list[bytes] = []
    done = total = 0
    for match in pattern.finditer(data):
        if match.start() < done or not _is_secret_name(match.group("name")):
            continue
        sep = match.group("sep")
        span = _value_span(data, match.end(), labelled=b":" in sep, json=b'"' in sep)
        if span is None:
            continue
        start, end = span
        out += [data[done:start], REDACTED]
        done = end
        total += 1
    out.append(data[done:])
    return b"".join(out), total


def _is_secret_name(name: bytes) -> bool:
    return name.lower().lstrip(b"-") not in _HARMLESS_NAMES and _SECRET_WORD.search(name) is not None


def _value_span(data: bytes, at: int, *, labelled: bool, json: bool) -> tuple[int, int] | None:
    """Where the value starting at ``at`` lies (inside its quotes); None when there is none, it is
    already redacted, or it is a JSON number, literal, object or list (an object's own names are looked
    at one by one). Each scan ends where the value does, at the latest at the line's end, and the next
    name is looked for after it: the whole pass stays linear."""
    first = data[at : at + 1]
    value = (_QUOTED.match(data, at) or _UNCLOSED.match(data, at)) if first in _QUOTES else None
    if value is not None:
        start, end = value.span(value.lastgroup or 0)
    elif json or first in (b"{", b"["):
        return None
    else:
        value = (_REST_OF_LINE if labelled else _BARE).match(data, at)
        if value is None:
            return None
        start, end = value.span()
    if start >= end or data[start:end] == REDACTED:
        return None
    return start, end
