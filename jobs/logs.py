"""Logging is configured once, here, by each entry point: JSON outside a terminal.

Library code logs through stdlib loggers under ``lakestream`` (:mod:`catalog.logs`); this sends
them, and the chatty libraries we use, to one stderr handler.
"""

from __future__ import annotations

import logging

from catalog.logs import RateLimit, send_to, structured_handler

#: Libraries that log on their own: shown from WARNING, one line per message per 30 s. psycopg_pool
#: logs every failed background reconnect (twice a second in an outage); the outage guard already
#: reports outages itself, one line per retry (catalog_unavailable).
THIRD_PARTY = ("psycopg",)


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    send_to(structured_handler(json=json), level.upper())
    quiet = structured_handler(json=json)
    quiet.addFilter(RateLimit())
    send_to(quiet, logging.WARNING, *THIRD_PARTY)
    for name in THIRD_PARTY:
        logging.getLogger(name).propagate = False
