"""Structured log events through the standard :mod:`logging` module.

A library must stay silent until the application decides where its logs go: ``catalog``,
``ingest`` and ``compaction`` log through :func:`get_logger`, whose events are ordinary
:class:`logging.LogRecord` objects under the ``lakestream`` logger (which carries a
:class:`logging.NullHandler`, so nothing reaches stderr unconfigured). The record's message is
readable by any handler (``commit_landed table='a.b' version=3``) and keeps the event's fields in
one attribute, :data:`EVENT_ATTRIBUTE`, so :func:`structured_handler` can render the same JSON
line the event was logged as.

Applications (the ``lakestream`` commands, and Spark workers on the driver's behalf) call
:func:`structured_handler` to attach one handler; library code never does.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

ROOT_LOGGER = "lakestream"
EVENT_ATTRIBUTE = "lakestream_event"

logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger writing to the stdlib logger ``name`` (keep it under ``lakestream.``)."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            _to_log_kwargs,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    return logger


def _to_log_kwargs(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> dict[str, Any]:
    """Turn an event into ``Logger.<level>`` keyword arguments: readable text plus the fields."""
    exc_info = event_dict.pop("exc_info", None)
    fields = dict(event_dict)
    event = str(fields.get("event", ""))
    text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items() if k != "event")])
    return {"msg": text, "extra": {EVENT_ATTRIBUTE: fields}, "exc_info": exc_info}


def structured_handler(
    *, level: int | str = logging.INFO, json: bool | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """A handler rendering lakestream's events (and any other record) as one line each: JSON
    when ``json`` (default: when ``stream`` is not a terminal), coloured key=value otherwise."""
    out = stream or sys.stderr
    as_json = not out.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            _lift_event,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.setLevel(level)
    return handler


def _lift_event(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Restore a lakestream event's own fields; other libraries' records keep their logger name."""
    record: logging.LogRecord = event_dict["_record"]
    fields = getattr(record, EVENT_ATTRIBUTE, None)
    if isinstance(fields, dict):
        event_dict.update(fields)
    else:
        event_dict["logger"] = record.name
    if record.exc_info:
        event_dict["exc_info"] = record.exc_info
    return event_dict


class RateLimit(logging.Filter):
    """Let through at most one record per ``interval_s`` for each message template, counting the
    rest, so a library that logs every failed reconnect cannot flood the output in an outage."""

    def __init__(self, interval_s: float = 30.0, *, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[tuple[str, object], float] = {}
        self._suppressed: dict[tuple[str, object], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            record.msg = f"{record.msg} ({suppressed} similar messages suppressed)"
        return True


def send_to(handler: logging.Handler, level: int | str, *loggers: str) -> None:
    """Route the named loggers (default: lakestream's) to ``handler`` at ``level``, replacing the
    handler an earlier call installed, so that calling it twice never doubles lines. For
    applications only."""
    for name in loggers or (ROOT_LOGGER,):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "_lakestream", False)]:
            logger.removeHandler(old)
        handler._lakestream = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(level)
