"""Logging inside Spark's Python workers, which never see the driver's logging set-up.

Configured once per worker process on the driver's behalf: JSON lines at the driver's level, so
executor output is as machine-readable as the driver's and debug lines stay off unless asked for.
"""

from __future__ import annotations

import logging

from catalog.logs import ROOT_LOGGER, send_to, structured_handler

_configured: dict[str, str] = {}


def configure_worker_logging(level: str) -> None:
    if _configured.get("level") == level:
        return
    send_to(structured_handler(json=True), level.upper())
    _configured["level"] = level


def driver_level() -> str:
    """The level lakestream's loggers pass on the driver, for the workers to use too."""
    return logging.getLevelName(logging.getLogger(ROOT_LOGGER).getEffectiveLevel())
