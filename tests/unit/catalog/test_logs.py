"""The library is silent until the application routes its logs; routed, each event is one line."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

from catalog.logs import RateLimit, get_logger, send_to, structured_handler


def test_an_unconfigured_application_sees_nothing_from_the_library() -> None:
    code = (
        "from catalog.logs import get_logger\n"
        "log = get_logger('lakestream.catalog')\n"
        "log.info('table_created', table='a.b')\n"
        "log.warning('commit_retried', attempt=2)\n"
        "log.error('commit_failed', reason='x')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "")


def test_a_routed_event_renders_as_the_json_line_it_was_logged_as() -> None:
    out = io.StringIO()
    logger = logging.getLogger("lakestream.test_logs")
    handler = structured_handler(json=True, stream=out)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        get_logger("lakestream.test_logs").info("commit_landed", table="a.b", version=3)
        get_logger("lakestream.test_logs").debug("not_shown")
    finally:
        logger.removeHandler(handler)
    [line] = out.getvalue().splitlines()
    event = json.loads(line)
    assert event["event"] == "commit_landed"
    assert (event["table"], event["version"], event["level"]) == ("a.b", 3, "info")
    assert "timestamp" in event


def test_plain_handlers_get_readable_text() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("lakestream.test_plain")
    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        get_logger("lakestream.test_plain").warning("outage", seconds=1.5)
    finally:
        logger.removeHandler(keep)
    assert [r.getMessage() for r in records] == ["outage seconds=1.5"]


def test_routing_twice_does_not_double_lines() -> None:
    out = io.StringIO()
    for _ in range(2):
        send_to(structured_handler(json=True, stream=out), logging.INFO, "lakestream.test_twice")
    get_logger("lakestream.test_twice").info("once")
    assert len(out.getvalue().splitlines()) == 1


def test_rate_limit_lets_one_line_per_interval_through_and_counts_the_rest() -> None:
    now = [0.0]
    limit = RateLimit(30.0, clock=lambda: now[0])

    def record() -> logging.LogRecord:
        return logging.LogRecord(
            "psycopg.pool", logging.WARNING, "", 0, "reconnect failed", (), None
        )

    assert limit.filter(record())
    assert not any(limit.filter(record()) for _ in range(5))
    now[0] = 31.0
    later = record()
    assert limit.filter(later)
    assert later.getMessage() == "reconnect failed (5 similar messages suppressed)"
