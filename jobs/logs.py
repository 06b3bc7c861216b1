"""Logging is configured once, here, by each entry point: JSON outside a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # psycopg_pool logs every failed background reconnect (twice a second in an outage) to the
    # root logger's last-resort handler; the outage guard reports outages itself, one line per
    # retry (catalog_unavailable).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
