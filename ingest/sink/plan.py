"""Everything an executor task needs to write a batch, shipped once per batch (pickled).

Executors never connect to PostgreSQL: the driver loads each target table's metadata and sends
it along, so a task can route rows to buckets, conform them and write files on its own. The
metadata carries the catalog's storage options (``TableMeta.storage``: how to reach an
object-store warehouse; keys are ``SecretStr`` and left out of every repr), so executors on
other hosts write to the same bucket as the driver would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import orjson

from catalog import DataFile, TableMeta
from ingest.debezium import DecoderConfig
from ingest.formats import SourceFormat
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions


@dataclass(frozen=True)
class SinkPlan:
    source_format: SourceFormat
    decoder: DecoderConfig
    tables: Mapping[str, TableMeta]
    """Target tables that exist, by name."""
    dead_letters: TableMeta
    batch_id: int
    writer: str
    #: How the tasks read the offset ranges the source emits (``emit=ranges``). Holds
    #: credentials: pickled to the executors, never logged.
    kafka: SourceOptions = field(repr=False)
    #: For plain JSON topics: topic -> table.
    json_tables: Mapping[str, str] = field(default_factory=dict)
    #: The driver's log level, applied in the Python workers (they do not inherit its config).
    log_level: str = "INFO"
    #: ``transactions: consistent``: which events go to the target tables, the rest is held.
    holding: Holding | None = None


class ShippedIds(AbstractSet[str]):
    """The transaction ids a batch's tasks write directly (:attr:`Holding.publish`), shipped as
    one JSON array and read back once per Python worker and batch.

    Why one array: every task of a batch unpickles the same plan, and ~20,000 ids a batch as
    pickled strings cost each task 3-5 ms and the driver as much to pickle. One array of bytes
    pickles as a copy; the worker's first task of the batch reads it, the next ones find it by
    comparing the bytes (:func:`_received`). Why not a frozenset: its hash table is built when
    first asked, once per worker."""

    __slots__ = ("_members", "ordered")

    def __init__(self, ordered: Iterable[str] = ()) -> None:
        self.ordered = tuple(ordered)
        self._members: frozenset[str] | None = None

    @property
    def members(self) -> frozenset[str]:
        """The ids as a set (built when first asked)."""
        if self._members is None:
            self._members = frozenset(self.ordered)
        return self._members

    def __contains__(self, txn: object) -> bool:
        return txn in self.members

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def __hash__(self) -> int:
        return hash(self.members)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return _received, (orjson.dumps(self.ordered),)


#: The last ids this Python worker read back: [(their JSON, the set)], at most one.
_last_received: list[tuple[bytes, ShippedIds]] = []
_receiving = threading.Lock()


def _received(shipped: bytes) -> ShippedIds:
    """The set of ``shipped`` (a JSON array), the one read last if it was the same."""
    with _receiving:
        if _last_received and _last_received[0][0] == shipped:
            return _last_received[0][1]
        ids = ShippedIds(orjson.loads(shipped))
        _last_received[:] = [(shipped, ids)]
        return ids


@dataclass(frozen=True)
class Holding:
    """How a task splits its records in ``transactions: consistent`` mode."""

    held: TableMeta
    """The job's held table (:mod:`ingest.sink.held`): raw records of events not published."""
    publish: AbstractSet[str]
    """Transactions whose events go straight to the target tables (the driver expects them to
    be published by this batch's commit, or they were published before, incomplete). The sink
    gives a :class:`ShippedIds`, which the tasks receive at a fraction of the cost."""
    dissolve: tuple[DataFile, ...] = ()
    """The held table's files at the batch's base version. The task reading ``owner`` reads
    them whole and treats their events as its own first records: those of ``publish`` are
    written to the target tables, the rest is held again in its held file. The driver then
    reads nothing back unless its decision publishes more than ``publish``."""
    owner: tuple[str, int, int] | None = None
    """(topic, partition, offset): the task whose range holds this offset dissolves."""

    def owned_by(self, ranges: Iterable[OffsetRange]) -> bool:
        """Whether the task with these ranges dissolves the held files."""
        if self.owner is None or not self.dissolve:
            return False
        topic, partition, offset = self.owner
        return any(
            r.topic == topic and r.partition == partition and r.start <= offset < r.end
            for r in ranges
        )
