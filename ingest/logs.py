"""Logging inside Spark's Python workers, which never see the driver's structlog setup.

Configured once per worker process: JSON lines at the driver's level, so executor output
is as machine-readable as the driver's and debug lines stay off unless asked for.
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured: dict[str, str] = {}


def configure_worker_logging(level: str) -> None:
    if _configured.get("level") == level:
        return
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured["level"] = level
