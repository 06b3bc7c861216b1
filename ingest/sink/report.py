"""What an executor task tells the driver: file metadata, schemas, offsets and counts - never rows.

Each task returns one :class:`TaskReport` as a JSON string; the driver collects a handful of them
per micro-batch and builds the single catalog commit from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc
from pydantic import BaseModel, ConfigDict, Field

from catalog import DataFile


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WrittenFile(_Model):
    table: str
    partition_desc: str
    file: DataFile


class NewTable(_Model):
    """A table the batch brings that the catalog does not have yet."""

    table: str
    kind: str  # "cdc" | "append"
    schema_b64: str
    primary_key: tuple[str, ...] = ()


class TableCounts(_Model):
    rows: int = 0
    upserts: int = 0
    deletes: int = 0
    #: Upserts that left columns out (unchanged TOASTed values), filled when merged.
    partial: int = 0

    def __add__(self, other: TableCounts) -> TableCounts:
        return TableCounts(
            rows=self.rows + other.rows,
            upserts=self.upserts + other.upserts,
            deletes=self.deletes + other.deletes,
            partial=self.partial + other.partial,
        )


class TopicFigures(_Model):
    """One topic's share of a batch, for the dead-letter guard (:mod:`ingest.sink.guard`)."""

    records: int = 0
    #: reason -> dead letters
    dead: dict[str, int] = Field(default_factory=dict)
    #: reason -> the error text of its first dead letter (it names the table and column)
    examples: dict[str, str] = Field(default_factory=dict)

    def __add__(self, other: TopicFigures) -> TopicFigures:
        dead = dict(self.dead)
        for reason, count in other.dead.items():
            dead[reason] = dead.get(reason, 0) + count
        return TopicFigures(
            records=self.records + other.records,
            dead=dead,
            examples={**other.examples, **self.examples},
        )

    @property
    def dead_letters(self) -> int:
        return sum(self.dead.values())


class TxnRanks(_Model):
    """Per transaction, the ranks (``total_order``) of the events a task read, as masks (bit n
    for rank n; see :mod:`ingest.transactions.ranges`).

    Masks that fit 64 bits (transactions of up to 63 events: nearly all) travel as one Arrow
    IPC stream of (id, mask) columns, ``packed``; wider ones as parallel lists of ids and hex
    masks. Why: a batch reports a transaction once per task that read some of it - in the
    benchmark 120,000 entries - and the driver waits for them before it commits; pydantic
    reading them as lists of strings and a Python loop merging them took ~70 ms a batch, the
    packed columns and :func:`merged_masks` ~20 ms. From a task the stream goes beside the
    report's JSON, as bytes (:func:`report_row`); in JSON it is base64.

    An id may come more than once (a task records a run of a transaction's events at a time,
    not a dict entry per event); masks are or-ed wherever they are read.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )

    packed: bytes = b""
    wide_ids: list[str] = Field(default_factory=list)
    wide_masks: list[str] = Field(default_factory=list)
    #: Events whose ``transaction`` block could not be read (passed through as without one).
    malformed: int = 0

    @classmethod
    def of(cls, masks: Mapping[str, int], *, malformed: int = 0) -> TxnRanks:
        return cls.of_pairs(list(masks), list(masks.values()), malformed=malformed)

    @classmethod
    def of_pairs(cls, ids: list[str], masks: list[int], *, malformed: int = 0) -> TxnRanks:
        """:meth:`of` for parallel lists in which an id may repeat."""
        if not masks or max(masks) < _NARROW_LIMIT:  # the common case, without a pass in Python
            return cls(packed=_pack(ids, masks) if ids else b"", malformed=malformed)
        narrow = [i for i, mask in enumerate(masks) if mask < _NARROW_LIMIT]
        wide = [i for i, mask in enumerate(masks) if mask >= _NARROW_LIMIT]
        return cls(
            packed=_pack([ids[i] for i in narrow], [masks[i] for i in narrow]) if narrow else b"",
            wide_ids=[ids[i] for i in wide],
            wide_masks=[format(masks[i], "x") for i in wide],
            malformed=malformed,
        )

    def narrow(self) -> pa.Table:
        """The packed (id, mask) columns."""
        if not self.packed:
            return _RANKS_SCHEMA.empty_table()
        return ipc.open_stream(self.packed).read_all()

    def wide(self) -> Iterator[tuple[str, int]]:
        return zip(self.wide_ids, (int(m, 16) for m in self.wide_masks), strict=True)

    def items(self) -> Iterator[tuple[str, int]]:
        """(transaction id, mask) pairs, each id once."""
        return iter(merged_masks([self]).items())


#: Masks below this travel as uint64 (bit 0 is never set: ranks start at 1).
_NARROW_LIMIT = 1 << 64
_RANKS_SCHEMA = pa.schema([("id", pa.string(), False), ("mask", pa.uint64(), False)])


def _pack(ids: list[str], masks: list[int]) -> bytes:
    columns = [pa.array(ids, pa.string()), pa.array(masks, pa.uint64())]
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, _RANKS_SCHEMA) as writer:
        writer.write_batch(pa.record_batch(columns, schema=_RANKS_SCHEMA))
    packed: bytes = sink.getvalue().to_pybytes()
    return packed


#: What a task returns (``mapInArrow``'s schema): its report as JSON, and its packed ranks as
#: bytes beside it (in the JSON they would be base64, a third larger, encoded by every task and
#: decoded by the driver before its decision).
REPORT_ROW = pa.schema([("report", pa.string()), ("ranks", pa.binary())])


def report_row(report: TaskReport) -> pa.RecordBatch:
    """A task's one row of :data:`REPORT_ROW`."""
    text = report.model_dump_json(exclude={"txn_ranks": {"packed"}})
    return pa.RecordBatch.from_pydict(
        {"report": [text], "ranks": [report.txn_ranks.packed]}, schema=REPORT_ROW
    )


def read_report(text: str, ranks: bytes | bytearray | None) -> TaskReport:
    """The report of a row of :data:`REPORT_ROW`, as the task made it."""
    report = TaskReport.model_validate_json(text)
    if not ranks:
        return report
    packed = report.txn_ranks.model_copy(update={"packed": bytes(ranks)})
    return report.model_copy(update={"txn_ranks": packed})


def merged_masks(ranks: Iterable[TxnRanks]) -> dict[str, int]:
    """Per transaction, the union of the masks of every report (a rank two tasks saw counts
    once): :func:`merged_union` of the packed columns, and the wide masks in a Python loop."""
    reports = list(ranks)
    ids, union = merged_union(reports)
    seen = dict(zip(ids.to_pylist(), union.tolist(), strict=True))
    for report in reports:
        for txn, mask in report.wide():
            seen[txn] = seen.get(txn, 0) | mask
    return seen


def merged_union(ranks: Iterable[TxnRanks]) -> tuple[pa.Array, np.ndarray]:
    """The packed columns of every report merged: each transaction id once, and the union of
    its masks (uint64) beside it. Ids are encoded to codes once in Arrow, masks or-ed per code
    in numpy. The wide masks are not in it (:func:`merged_masks` adds them)."""
    narrow = pa.concat_tables([_RANKS_SCHEMA.empty_table(), *(r.narrow() for r in ranks)])
    if not narrow.num_rows:
        return pa.array([], pa.string()), np.zeros(0, np.uint64)
    encoded = pc.dictionary_encode(narrow["id"]).combine_chunks()
    union = np.zeros(len(encoded.dictionary), np.uint64)
    np.bitwise_or.at(union, encoded.indices.to_numpy(), narrow["mask"].to_numpy())
    return encoded.dictionary, union


class TaskReport(_Model):
    files: list[WrittenFile] = Field(default_factory=list)
    #: topic -> partition -> next offset (max offset seen + 1)
    offsets: dict[str, dict[str, int]] = Field(default_factory=dict)
    new_tables: list[NewTable] = Field(default_factory=list)
    #: table -> the wider schema (base64 Arrow IPC) its rows were written under
    evolved: dict[str, str] = Field(default_factory=dict)
    counts: dict[str, TableCounts] = Field(default_factory=dict)
    refused: list[tuple[str, str | None, str]] = Field(default_factory=list)
    dead_letters: int = 0
    ignored: int = 0
    tombstones: int = 0
    records: int = 0
    #: topic -> its records and dead letters in this task
    topics: dict[str, TopicFigures] = Field(default_factory=dict)
    max_timestamp_ms: int | None = None
    #: ``transactions: consistent``: per transaction id, the ranks (``total_order``) of the
    #: events the task read.
    txn_ranks: TxnRanks = Field(default_factory=TxnRanks)
    #: Records the task put into the held table instead of a target table.
    held: int = 0
    #: Held events of earlier batches this task read back (``Holding.dissolve``): published
    #: or held again.
    dissolved: int = 0
    #: The task's own CPU and wall time (read + decode + write), for the batch log.
    cpu_ms: int = 0
    wall_ms: int = 0
    #: When the task began (wall clock, ms since the epoch): in ``transactions: consistent``
    #: the driver begins the next batch's read-ahead as long after a batch's start as its
    #: first task began (:func:`ingest.sink.consistent.read_ahead_next`).
    started_ms: int | None = None


def merge_offsets(
    base: dict[str, dict[str, int]], *more: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Per topic-partition, the furthest next offset of all inputs."""
    merged: dict[str, dict[str, int]] = defaultdict(dict)
    for offsets in (base, *more):
        for topic, partitions in offsets.items():
            for partition, offset in partitions.items():
                merged[topic][partition] = max(offset, merged[topic].get(partition, 0))
    return {topic: dict(sorted(parts.items())) for topic, parts in sorted(merged.items())}


def total_counts(reports: Iterable[TaskReport]) -> dict[str, TableCounts]:
    totals: dict[str, TableCounts] = {}
    for report in reports:
        for table, c in report.counts.items():
            totals[table] = totals.get(table, TableCounts()) + c
    return totals


def topic_figures(reports: Iterable[TaskReport]) -> dict[str, TopicFigures]:
    """Per topic, the figures of all tasks of a batch added up."""
    totals: dict[str, TopicFigures] = {}
    for report in reports:
        for topic, figures in report.topics.items():
            totals[topic] = totals.get(topic, TopicFigures()) + figures
    return totals
