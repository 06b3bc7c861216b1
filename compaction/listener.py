"""Wake-ups on commits: ``LISTEN lakestream_commit`` on a connection of its own.

The committer notifies the channel inside every publish transaction, so the coordinator plans a
table moments after a commit instead of a poll interval later. Notifications are only a hint:
the coordinator's heads query decides what changed, so a lost notification (connection dropped,
server restarted) costs at most one poll interval, never a missed table.
"""

from __future__ import annotations

import time
import uuid

import psycopg
from psycopg import sql

from catalog import COMMIT_CHANNEL
from catalog.logs import get_logger

log = get_logger("lakestream.compaction.listener")


class CommitListener:
    def __init__(self, dsn: str, *, channel: str = COMMIT_CHANNEL, debounce_s: float = 0.2):
        self._dsn = dsn
        self._channel = channel
        self._debounce = debounce_s
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._failing = False  # logged once per outage, not on every poll step

    def wait(self, timeout: float) -> set[uuid.UUID]:
        """Block until a commit is notified or ``timeout`` passes; the notified table ids.

        After the first notification it lingers ``debounce_s`` to gather a burst into one round.
        If the connection fails, it is reopened on the next call and this call returns empty
        after waiting out the timeout (the poll fallback).
        """
        try:
            conn = self._connection()
            self._failing = False
            tables = self._drain(conn, timeout, stop_after=1)
            if tables:
                tables |= self._drain(conn, self._debounce, stop_after=None)
            return tables
        except psycopg.Error as exc:
            if not self._failing:
                log.warning("commit_listener_unavailable", error=" ".join(str(exc).split()))
            self._failing = True
            self.close()
            time.sleep(timeout)
            return set()

    def _drain(
        self, conn: psycopg.Connection[tuple[object, ...]], timeout: float, stop_after: int | None
    ) -> set[uuid.UUID]:
        found = set()
        for note in conn.notifies(timeout=timeout, stop_after=stop_after):
            try:
                found.add(uuid.UUID(note.payload))
            except ValueError:
                continue  # someone else's payload on our channel: still a wake-up
        return found

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn, autocommit=True, application_name="compactor")
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
