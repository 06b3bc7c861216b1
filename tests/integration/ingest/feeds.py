"""Topics fed by tests, with a model of what the lake must hold after reading all of them.

A CDC feed sends Debezium changes (inserts, updates, deletes of a few hundred keys, ordered by
LSN); an append feed sends JSON events with unique ids. ``rows`` / ``events`` are what the lake
must show, ``ends`` the offsets the job must have stored when it has read everything.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson

from catalog import Catalog
from tests.unit.ingest.debezium_events import customer, customer_change


@dataclass
class Feed:
    kind: str
    """``cdc`` (Debezium changes) or ``append`` (JSON events)."""
    topic: str
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    keys: int = 25
    rows: dict[int, dict] = field(default_factory=dict)
    events: Counter[int] = field(default_factory=Counter)
    ends: dict[str, int] = field(default_factory=dict)
    lsn: int = 1_000
    next_id: int = 0

    def produce(self, kafka, n: int) -> None:
        records = [self._change() if self.kind == "cdc" else self._event() for _ in range(n)]
        for sent in kafka.produce(self.topic, records):
            part = str(sent.partition)
            self.ends[part] = max(self.ends.get(part, 0), sent.offset + 1)

    def produce_until(self, kafka, stop: threading.Event, chunk: int = 20) -> None:
        while not stop.is_set():
            self.produce(kafka, chunk)
            time.sleep(self.rng.uniform(0.05, 0.3))

    def _event(self) -> tuple[bytes, bytes]:
        self.next_id += 1
        self.events[self.next_id] += 1
        return str(self.next_id).encode(), orjson.dumps({"id": self.next_id, "at": self.lsn})

    def _change(self) -> tuple[bytes, bytes]:
        self.lsn += 8
        id_ = self.rng.randrange(self.keys)
        if id_ in self.rows and self.rng.random() < 0.2:
            del self.rows[id_]
            before = {"id": id_, "first_name": "", "last_name": "", "email": None}
            record = customer_change("d", id_, lsn=self.lsn, before=before)
        else:
            op = "u" if id_ in self.rows else "c"
            self.rows[id_] = customer(id_, f"{self.lsn}@example.com")
            record = customer_change(op, id_, lsn=self.lsn, after=self.rows[id_])
        return record.key, record.value

    def assert_lake_holds_it(self, catalog: Catalog, table: str) -> None:
        """The table equals the model: no key twice, no event twice, nothing missing."""
        rows = catalog.load_table(table).scan().to_arrow().to_pylist()
        if self.kind == "cdc":
            ids = [r["id"] for r in rows]
            assert len(ids) == len(set(ids)), "a key appears twice"
            assert {r["id"]: r["email"] for r in rows} == {
                i: r["email"] for i, r in self.rows.items()
            }
        else:
            counts = Counter(r["id"] for r in rows)
            assert counts == self.events, (
                f"duplicated: {sum((counts - self.events).values())}, "
                f"missing: {sum((self.events - counts).values())}"
            )


def stored_offsets(catalog: Catalog, job: str, topic: str) -> dict[str, int]:
    progress = catalog.writer_progress(job)
    return dict(progress.source_offsets.get(topic, {})) if progress else {}
