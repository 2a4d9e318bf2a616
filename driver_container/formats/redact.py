"""What a bug report must never carry (pure): secret-looking names and the values they set.

``bug-report`` never reads a service-account token, a kubeconfig or the environment beyond an
allow-list; this is the second line: every member's bytes pass ``redact`` before they are archived, so a
secret that reached a file it copies (NVIDIA's nvidia-bug-report.sh appends /proc/cmdline, where a Talos
node managed by Omni carries ``siderolink.api=...?jointoken=...``) is replaced, and counted in the index.
"""

from __future__ import annotations

import re

# An environment variable whose name says it holds a secret.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|CERT|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
REDACTED = b"<redacted>"
_PATTERNS = (
    # name=value with a secret-looking name: query strings, kernel command lines, env dumps, configs.
    re.compile(
        rb"(?i)(?P<keep>[\w.-]*(?:token|secret|passw(?:or)?d|credential|key|auth|cookie|session)[\w.-]*=)"
        rb"(?P<value>[^\s&\"',;<>]+)"
    ),
    # The same in JSON: "name": "value" (modinfo's "sig_key:" lines are neither form: kept).
    re.compile(
        rb'(?i)(?P<keep>"[\w.-]*(?:token|secret|passw(?:or)?d|credential|key|auth|cookie|session)[\w.-]*"'
        rb'\s*:\s*")(?P<value>[^"]+)'
    ),
    # HTTP authorisation schemes as they appear in a header or a curl line.
    re.compile(rb"(?i)(?P<keep>\b(?:bearer|basic)\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})"),
    # A JSON Web Token anywhere (a service-account token is one).
    re.compile(rb"(?P<keep>)(?P<value>eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"),
)


def looks_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def redact(data: bytes) -> tuple[bytes, int]:
    """``data`` with every secret-looking value replaced by ``<redacted>``, and how many were."""
    total = 0
    for pattern in _PATTERNS:
        data, count = pattern.subn(_replacement, data)
        total += count
    return data, total


def _replacement(match: re.Match[bytes]) -> bytes:
    if match.group("value") == REDACTED:
        return match.group(0)
    return match.group("keep") + REDACTED
