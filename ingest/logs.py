"""Logging inside Spark's Python workers, which never see the driver's logging set-up, and the
route of librdkafka's own log lines.

Workers are configured once per process on the driver's behalf: JSON lines at the driver's
level, so executor output is as machine-readable as the driver's and debug lines stay off unless
asked for.

librdkafka logs every failed connect attempt (hundreds of lines a minute while a broker is down)
and, left alone, writes them raw to stderr. Every client lakestream makes passes
:func:`kafka_logger` as confluent-kafka's ``logger`` instead: the lines become records of the
``lakestream.kafka`` logger, so they stay silent until an application routes ``lakestream``, and
then arrive at most once per 30 s per kind (librdkafka's *facility*, such as ``FAIL``).
"""

from __future__ import annotations

import logging

from catalog.logs import ROOT_LOGGER, RateLimit, send_to, structured_handler

KAFKA_LOGGER = f"{ROOT_LOGGER}.kafka"
#: librdkafka's syslog level for its clients: warnings and worse (4), not its chatter (6).
KAFKA_LOG_LEVEL = 4

_configured: dict[str, str] = {}


def configure_worker_logging(level: str) -> None:
    if _configured.get("level") == level:
        return
    send_to(structured_handler(json=True), level.upper())
    _configured["level"] = level


def driver_level() -> str:
    """The level lakestream's loggers pass on the driver, for the workers to use too."""
    return logging.getLevelName(logging.getLogger(ROOT_LOGGER).getEffectiveLevel())


class LibrdkafkaRecord(logging.Filter):
    """Turn confluent-kafka's ``"%s [%s] %s"`` (facility, client name, text) into one template per
    facility, so that :class:`RateLimit` counts connect failures of every client as one kind."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 3:
            facility, _client, text = args
            record.msg = "librdkafka " + str(facility).replace("%", "%%") + ": %s"
            record.args = (text,)
        return True


def kafka_logger() -> logging.Logger:
    """The logger every confluent-kafka client of lakestream logs through (its ``logger``
    setting); built in the process that makes the client, as loggers do not pickle."""
    logger = logging.getLogger(KAFKA_LOGGER)
    if not any(isinstance(f, LibrdkafkaRecord) for f in logger.filters):
        logger.addFilter(LibrdkafkaRecord())
        logger.addFilter(RateLimit())
    return logger
