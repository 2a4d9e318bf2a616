"""Logging set-up: human lines by default, one JSON object per line on request."""

from __future__ import annotations

import enum
import json
import logging
import sys
import time

HUMAN_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"


class LogFormat(enum.StrEnum):
    """The values of --log-format / LOG_FORMAT, exactly (a choice: anything else is a usage error, exit 2)."""

    human = "human"
    json = "json"


LOG_FORMATS = tuple(f.value for f in LogFormat)
LOG_FORMAT_HELP = "human (one line per record) or json (one JSON object per line); default: LOG_FORMAT, else human"
VERBOSE_HELP = "debug logging; default: VERBOSE, else off"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        details = getattr(record, "details", None)  # an error's structured fields (cli.report_error)
        if isinstance(details, dict):
            entry["details"] = {k: list(v) if isinstance(v, tuple) else v for k, v in details.items()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(*, json_format: bool = False, verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(HUMAN_FORMAT, datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
