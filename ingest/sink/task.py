"""The executor half of the sink: decode one task's records, write files, report metadata.

One Spark task holds one topic-partition range, so all changes of a key (Debezium keys a topic
by primary key) are in one task: each task writes at most one sorted run per bucket, and the
``_ls_seq`` sequence column orders changes across runs whatever the run order. Only the report
(file metadata, schemas, offsets, counts) goes back to the driver; rows never do.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.json as pa_json

from catalog import (
    SEQUENCE_COLUMN,
    TableCommit,
    TableMeta,
    conform_changes,
    schema_to_base64,
    stage_append,
    stage_changes,
)
from catalog.files import check_evolution, is_widening, read_whole_files
from catalog.logs import get_logger
from ingest.collector import tune_worker_collector
from ingest.debezium import (
    DeadLetter,
    DeadLetterReason,
    DecodedTable,
    RawRecord,
    RecordChunk,
    decode_chunks,
)
from ingest.formats import SourceFormat
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions
from ingest.kafka.reader import MessageField, message_key, message_millis, read_messages
from ingest.kafka.schema import offset_of, ranges_of
from ingest.logs import configure_worker_logging
from ingest.sink.held import HELD_SCHEMA, HeldSplit, chunks_of, sub_chunk
from ingest.sink.plan import SinkPlan
from ingest.sink.report import (
    NewTable,
    TableCounts,
    TaskReport,
    TopicFigures,
    TxnRanks,
    WrittenFile,
    report_row,
)
from ingest.transactions import is_transaction_topic

DEAD_LETTER_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("reason", pa.string()),
    ("error", pa.string()), ("table", pa.string()), ("writer", pa.string()),
    ("batch_id", pa.int64()),
])  # fmt: skip


def write_task(batches: Iterator[pa.RecordBatch], plan: SinkPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the task's offset ranges in, their records read from Kafka here,
    decoded and written; one report row out (the records never pass through the JVM)."""
    clock = TaskClock.start(plan)
    ranges = [rng for batch in batches for rng in ranges_of(batch)]
    chunks = list(read_chunks(_ranges_to_read(ranges, plan), plan.kafka))
    yield report_row(write_records(chunks, plan, clock, offsets=_range_ends(ranges), ranges=ranges))


@dataclass(frozen=True)
class TaskClock:
    """When a task began (wall clock, CPU, monotonic), for its report's timings; starting it
    also readies the Python worker (its collector, its logging)."""

    began: float
    cpu: float
    monotonic: float

    @classmethod
    def start(cls, plan: SinkPlan) -> TaskClock:
        clock = cls(time.time(), time.process_time(), time.monotonic())
        tune_worker_collector()
        configure_worker_logging(plan.log_level)
        return clock


def write_records(
    chunks: list[RecordChunk],
    plan: SinkPlan,
    clock: TaskClock,
    *,
    offsets: dict[str, dict[str, int]],
    ranges: Sequence[OffsetRange] = (),
) -> TaskReport:
    """A task's records, however they were read (by the task from its ``ranges``, or by Spark's
    Kafka source: :mod:`ingest.sink.records`), decoded and written; its report. ``offsets``
    are where the task's reading ends (empty when the driver knows it from Spark's log)."""
    log = get_logger("lakestream.ingest.task")  # per call: loggers do not pickle
    # the newest record of each chunk (offset order) stands for the chunk in the lag figure
    known = [t for t in (c.timestamps_ms[-1] for c in chunks) if t is not None]
    report = TaskReport(
        records=sum(len(c) for c in chunks),
        topics=_records_by_topic(chunks),
        offsets=offsets,
        max_timestamp_ms=max(known) if known else None,
    )
    dissolved = _dissolved(list(ranges), plan)
    if dissolved:
        report = report.model_copy(update={"dissolved": sum(len(c) for c in dissolved)})
        chunks = [*dissolved, *chunks]  # older than the task's records: they come first
    if chunks:
        report = write_chunks(chunks, plan, report)
    report = report.model_copy(
        update={
            "cpu_ms": round((time.process_time() - clock.cpu) * 1000),
            "wall_ms": round((time.monotonic() - clock.monotonic) * 1000),
            "started_ms": round(clock.began * 1000),
        }
    )
    log.debug("task_written", records=report.records, files=len(report.files))
    return report


def _ranges_to_read(ranges: list[OffsetRange], plan: SinkPlan) -> list[OffsetRange]:
    """In ``transactions: consistent`` the driver has read the transaction topic's ranges (its
    markers) and reports their records itself: the task skips them, and still reports their
    ends as its offsets."""
    if plan.holding is None:
        return ranges
    return [rng for rng in ranges if not is_transaction_topic(rng.topic)]


def _dissolved(ranges: list[OffsetRange], plan: SinkPlan) -> list[RecordChunk]:
    """The held events of earlier batches, when this task is the one to dissolve them."""
    holding = plan.holding
    if holding is None or not holding.owned_by(ranges):
        return []
    held = holding.held
    rows = read_whole_files(held.location, holding.dissolve, HELD_SCHEMA, held.current_schema_id)
    return chunks_of(rows)


def write_chunks(chunks: list[RecordChunk], plan: SinkPlan, report: TaskReport) -> TaskReport:
    """Decode and write records (the driver calls it too, for held events it publishes).

    With ``plan.holding`` (``transactions: consistent``), events of transactions not chosen for
    publication go raw into the held table, and the report counts every event's rank."""
    held = None
    if plan.source_format is SourceFormat.DEBEZIUM:
        split = None if plan.holding is None else HeldSplit(plan.holding.publish)
        report = _write_debezium(chunks, plan, report, split)
        if split is not None:
            held = split.held()
            report = report.model_copy(update={"txn_ranks": split.txn_ranks()})
    else:
        if plan.holding is not None:
            chunks, held, txn_ranks = split_for_holding(chunks, plan.holding.publish)
            report = report.model_copy(update={"txn_ranks": txn_ranks})
        report = _write_json(chunks, plan, report)
    if held is not None and held.num_rows and plan.holding is not None:
        acc = _Accumulator(report)
        acc.commit(stage_append(plan.holding.held, held))
        report = acc.report.model_copy(update={"held": report.held + held.num_rows})
    return report


def split_for_holding(
    chunks: Iterable[RecordChunk], publish: AbstractSet[str]
) -> tuple[list[RecordChunk], pa.Table | None, TxnRanks]:
    """Chunks of the records to write now, the held table's rows of the others, and per
    transaction the ranks of its events, for sources the decoder's hold does not serve (plain
    JSON). A chunk with nothing to hold passes unchanged."""
    split = HeldSplit(publish)
    kept: list[RecordChunk] = []
    for chunk in chunks:
        for i, value in enumerate(chunk.values):
            if value is not None:
                split.raw(chunk, i, value)
        holding = split.held_in(chunk)
        if not holding:
            kept.append(chunk)
            continue
        rest = [i for i in range(len(chunk)) if i not in holding]
        if rest:
            kept.append(sub_chunk(chunk, rest))
    return kept, split.held(), split.txn_ranks()


def read_chunks(ranges: Iterable[OffsetRange], kafka: SourceOptions) -> Iterator[RecordChunk]:
    """The records of the task's offset ranges, read here, as decoder-ready chunks.

    Values are taken out of librdkafka's messages at once (every one is parsed); offsets of a
    contiguous run are a ``range``; keys and timestamps are read from the messages only where
    the decoder asks (deletes, key learning, dead letters, positions without an LSN).
    """
    for rng in ranges:
        for messages in read_messages(rng, kafka):
            first, last = offset_of(messages[0]), offset_of(messages[-1])
            contiguous = last - first + 1 == len(messages)
            yield RecordChunk(
                rng.topic,
                rng.partition,
                range(first, last + 1) if contiguous else [offset_of(m) for m in messages],
                MessageField(messages, message_key),
                [m.value() for m in messages],
                MessageField(messages, message_millis),
            )


def _records_by_topic(chunks: Iterable[RecordChunk]) -> dict[str, TopicFigures]:
    counts: dict[str, int] = defaultdict(int)
    for chunk in chunks:
        counts[chunk.topic] += len(chunk)
    return {topic: TopicFigures(records=n) for topic, n in counts.items()}


def _range_ends(ranges: Iterable[OffsetRange]) -> dict[str, dict[str, int]]:
    """Where the next batch starts: a range's end, even when its last offsets were gaps
    (transaction markers, compacted-away records), so a restart never re-reads them."""
    offsets: dict[str, dict[str, int]] = defaultdict(dict)
    for rng in ranges:
        key = str(rng.partition)
        offsets[rng.topic][key] = max(rng.end, offsets[rng.topic].get(key, 0))
    return dict(offsets)


# -- Debezium topics -------------------------------------------------------------------------


def _write_debezium(
    chunks: list[RecordChunk], plan: SinkPlan, report: TaskReport, hold: HeldSplit | None
) -> TaskReport:
    decoded = decode_chunks(chunks, plan.decoder, hold)
    update = _Accumulator(report)
    for segment in decoded.tables:
        _write_segment(segment, plan, update)
    update.dead_letters(decoded.dead_letters, plan)
    return update.report.model_copy(
        update={"ignored": decoded.ignored, "tombstones": decoded.tombstones}
    )


def _write_segment(segment: DecodedTable, plan: SinkPlan, acc: _Accumulator) -> None:
    proposed = pa.schema(
        [*segment.source_schema, pa.field(SEQUENCE_COLUMN, pa.binary(16), nullable=False)]
    )
    meta = plan.tables.get(segment.table)
    if meta is None:
        acc.new_table(
            NewTable(
                table=segment.table,
                kind="cdc",
                schema_b64=schema_to_base64(proposed),
                primary_key=tuple(segment.primary_key),
            )
        )
        return
    target = _follow_schema(meta, proposed, acc)
    if target is None:
        return
    acc.commit(stage_changes(target, conform_changes(target, segment.rows)))
    acc.count(
        segment.table,
        TableCounts(
            rows=segment.rows.num_rows,
            upserts=segment.upserts,
            deletes=segment.deletes,
            partial=segment.partial,
        ),
    )


def _follow_schema(meta: TableMeta, proposed: pa.Schema, acc: _Accumulator) -> TableMeta | None:
    """The table as this batch must write it: its schema widened by what the source added."""
    union, refused = widen_schema(meta, [proposed])
    if refused is not None:
        acc.refuse(str(meta.name), *refused)
        return None
    if union.equals(meta.schema, check_metadata=False):
        return meta
    acc.evolve(str(meta.name), union)
    return replace(meta, schemas={**meta.schemas, meta.current_schema_id: union})


def widen_schema(
    meta: TableMeta, proposed: Sequence[pa.Schema]
) -> tuple[pa.Schema, tuple[str | None, str] | None]:
    """The table schema followed by what sources propose, and the first refusal if any.

    New columns are added (nullable); a column type the table can widen to is taken; a narrower
    type is kept as the table's (the data is widened on write); columns a source no longer sends
    stay (they read as null). Any other type change is refused, naming the column.
    """
    table = str(meta.name)
    fields = {f.name: f for f in meta.schema}
    for schema in proposed:
        for field in schema:
            old = fields.get(field.name)
            if old is None:
                fields[field.name] = field.with_nullable(True)
            elif old.type.equals(field.type) or is_widening(field.type, old.type):
                continue
            elif is_widening(old.type, field.type):
                fields[field.name] = old.with_type(field.type)
            else:
                reason = f"column {field.name!r} changed type from {old.type} to {field.type}"
                return meta.schema, (field.name, f"table {table!r}: {reason}")
    union = pa.schema(list(fields.values()), metadata=meta.schema.metadata)
    refused = [
        c
        for c in check_evolution(meta.schema, union, primary_key=meta.primary_key)
        if not c.allowed
    ]
    if refused:
        return meta.schema, (refused[0].column, refused[0].message(table))
    return union, None


# -- plain JSON topics -------------------------------------------------------------------------


def _write_json(chunks: list[RecordChunk], plan: SinkPlan, report: TaskReport) -> TaskReport:
    acc = _Accumulator(report)
    by_topic: dict[str, list[RawRecord]] = defaultdict(list)
    for r in (c.record(i) for c in chunks for i in range(len(c))):
        if r.value is None:
            acc.report = acc.report.model_copy(update={"tombstones": acc.report.tombstones + 1})
        else:
            by_topic[r.topic].append(r)
    bad: list[DeadLetter] = []
    for topic, items in by_topic.items():
        table = plan.json_tables[topic]
        meta = plan.tables.get(table)
        rows, failed = _parse_json(items, meta.schema if meta else None, table)
        bad.extend(failed)
        if meta is None:
            if rows.num_rows:
                acc.new_table(
                    NewTable(table=table, kind="append", schema_b64=schema_to_base64(rows.schema))
                )
            continue
        if rows.num_rows:
            acc.commit(stage_append(meta, rows))
            acc.count(table, TableCounts(rows=rows.num_rows, upserts=rows.num_rows))
    acc.dead_letters(bad, plan)
    return acc.report


def _parse_json(
    items: list[RawRecord], schema: pa.Schema | None, table: str
) -> tuple[pa.Table, list[DeadLetter]]:
    """Parse all values at once (pyarrow's JSON reader); on any error, one by one to find the
    bad records, which become dead letters while the good ones are kept."""
    try:
        return _read_json([r.value or b"" for r in items], schema), []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    good: list[pa.Table] = []
    bad: list[DeadLetter] = []
    for r in items:
        try:
            good.append(_read_json([r.value or b""], schema))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            bad.append(DeadLetter.of(r, DeadLetterReason.MALFORMED_JSON, str(exc)[:2000], table))
    rows = (
        pa.concat_tables(good, promote_options="permissive")
        if good
        else (schema.empty_table() if schema else pa.table({}))
    )
    return rows, bad


def _read_json(values: list[bytes], schema: pa.Schema | None) -> pa.Table:
    if any(b"\n" in v for v in values) or any(not v.strip() for v in values):
        raise pa.ArrowInvalid("values must be single-line, non-empty JSON objects")
    options = pa_json.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="error" if schema else "infer"
    )
    table = pa_json.read_json(io.BytesIO(b"\n".join(values)), parse_options=options)
    if table.num_rows != len(values):
        raise pa.ArrowInvalid("one value held several JSON documents")
    return table


# -- accumulating the report -------------------------------------------------------------------


class _Accumulator:
    def __init__(self, report: TaskReport) -> None:
        self.report = report

    def _add(self, **changes: object) -> None:
        self.report = self.report.model_copy(update=changes)

    def commit(self, commit: TableCommit) -> None:
        files = [
            WrittenFile(table=commit.table, partition_desc=p.partition_desc, file=f)
            for p in commit.partitions
            for f in p.added
        ]
        self._add(files=[*self.report.files, *files])

    def count(self, table: str, counts: TableCounts) -> None:
        old = self.report.counts.get(table, TableCounts())
        self._add(counts={**self.report.counts, table: old + counts})

    def new_table(self, table: NewTable) -> None:
        if all(t.table != table.table for t in self.report.new_tables):
            self._add(new_tables=[*self.report.new_tables, table])

    def evolve(self, table: str, schema: pa.Schema) -> None:
        self._add(evolved={**self.report.evolved, table: schema_to_base64(schema)})

    def refuse(self, table: str, column: str | None, reason: str) -> None:
        self._add(refused=[*self.report.refused, (table, column, reason)])

    def dead_letters(self, letters: Sequence[DeadLetter], plan: SinkPlan) -> None:
        if not letters:
            return
        rows = pa.Table.from_pylist(
            [
                {
                    "topic": d.topic,
                    "partition": d.partition,
                    "offset": d.offset,
                    "key": d.key,
                    "value": d.value,
                    "reason": str(d.reason),
                    "error": d.error,
                    "table": d.table,
                    "writer": plan.writer,
                    "batch_id": plan.batch_id,
                }
                for d in letters
            ],
            schema=DEAD_LETTER_SCHEMA,
        )
        self.commit(stage_append(plan.dead_letters, rows))
        topics = dict(self.report.topics)
        for topic, figures in _dead_by_topic(letters).items():
            topics[topic] = topics.get(topic, TopicFigures()) + figures
        self._add(dead_letters=self.report.dead_letters + len(letters), topics=topics)


def _dead_by_topic(letters: Sequence[DeadLetter]) -> dict[str, TopicFigures]:
    """Per topic, the dead letters by reason and the error of the first of each reason."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    examples: dict[str, dict[str, str]] = defaultdict(dict)
    for d in letters:
        reason = str(d.reason)
        counts[d.topic][reason] += 1
        if reason not in examples[d.topic]:
            examples[d.topic][reason] = f"{d.table}: {d.error}" if d.table else d.error
    return {
        topic: TopicFigures(dead=dict(reasons), examples=examples[topic])
        for topic, reasons in counts.items()
    }
