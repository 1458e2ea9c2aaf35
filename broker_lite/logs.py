"""Structured logs: one JSON object per line on stderr (or plain text).

Call ``log.info("msg", extra=fields(topic="t", partition=3))`` to attach fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_FIELDS = "sparklog_fields"


def fields(**values: Any) -> dict[str, Any]:
    """The ``extra`` argument that attaches structured fields to a log record."""
    return {_FIELDS: values}


class JsonFormatter(logging.Formatter):
    """Formats a record as a single JSON line with its structured fields."""

    def __init__(self, broker_id: int | None = None) -> None:
        super().__init__()
        self.broker_id = broker_id

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self.broker_id is not None:
            out["broker_id"] = self.broker_id
        out.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extra = getattr(record, _FIELDS, {})
        if extra:
            base += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return base


def setup_logging(
    level: str = "INFO",
    fmt: str = "json",
    broker_id: int | None = None,
    loggers: tuple[str, ...] = ("sparklog.broker_lite",),
) -> None:
    """Send the named packages' logs to stderr in the chosen format (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(broker_id))
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in loggers:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
