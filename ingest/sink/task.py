"""The executor half of the sink: decode one task's records, write files, report metadata.

One Spark task holds one topic-partition range, so all changes of a key (Debezium keys a topic
by primary key) are in one task: each task writes at most one sorted run per bucket, and the
``_ls_seq`` sequence column orders changes across runs whatever the run order. Only the report
(file metadata, schemas, offsets, counts) goes back to the driver; rows never do.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import structlog

from catalog.files.evolution import check_evolution, is_widening
from catalog.meta import TableMeta
from catalog.model import SEQUENCE_COLUMN, TableCommit
from catalog.schemas import to_base64
from catalog.writes import changes, stage_append, stage_changes
from ingest.debezium import (
    DeadLetter,
    DeadLetterReason,
    DecodedTable,
    RawRecord,
    decode_records,
)
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions
from ingest.kafka.reader import read_messages
from ingest.kafka.schema import offset_of, ranges_of
from ingest.logs import configure_worker_logging
from ingest.sink.plan import SinkPlan, SourceFormat
from ingest.sink.report import NewTable, TableCounts, TaskReport, WrittenFile

REPORT_SCHEMA = "report string"
DEAD_LETTER_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("reason", pa.string()),
    ("error", pa.string()), ("table", pa.string()), ("writer", pa.string()),
    ("batch_id", pa.int64()),
])  # fmt: skip


def write_task(batches: Iterator[pa.RecordBatch], plan: SinkPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: all of one task's Kafka rows (or offset ranges) in, one report out."""
    configure_worker_logging(plan.log_level)
    log = structlog.get_logger("lakestream.ingest.task")  # per call: loggers do not pickle
    ranges: list[OffsetRange] = []
    if plan.kafka is None:
        records = list(_records(batches))
    else:
        ranges = [rng for batch in batches for rng in ranges_of(batch)]
        records = list(_ranged_records(ranges, plan.kafka))
    stamps = [r.timestamp_ms for r in records if r.timestamp_ms is not None]
    report = TaskReport(
        records=len(records),
        offsets=_range_ends(ranges) if ranges else _next_offsets(records),
        max_timestamp_ms=max(stamps) if stamps else None,
    )
    if records:
        report = (_write_debezium if plan.source_format is SourceFormat.DEBEZIUM else _write_json)(
            records, plan, report
        )
    log.debug("task_written", records=len(records), files=len(report.files))
    yield pa.RecordBatch.from_pydict({"report": [report.model_dump_json()]})


def _records(batches: Iterable[pa.RecordBatch]) -> Iterator[RawRecord]:
    for batch in batches:
        # Kafka timestamps are milliseconds; the column's unit is the source's business
        stamps = pc.cast(
            pc.cast(batch.column("timestamp"), pa.timestamp("ms")), pa.int64()
        ).to_pylist()
        yield from (
            RawRecord(topic=t, partition=p, offset=o, key=k, value=v, timestamp_ms=ts)
            for t, p, o, k, v, ts in zip(
                batch.column("topic").to_pylist(),
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                batch.column("key").to_pylist(),
                batch.column("value").to_pylist(),
                stamps,
                strict=True,
            )
        )


def _ranged_records(ranges: Iterable[OffsetRange], kafka: SourceOptions) -> Iterator[RawRecord]:
    """The records of the offset ranges an ``emit=ranges`` source handed this task, read here.

    Straight from librdkafka's messages to the decoder: no Arrow, no JVM in between.
    """
    for rng in ranges:
        for messages in read_messages(rng, kafka):
            for m in messages:
                kind, millis = m.timestamp()
                yield RawRecord(
                    rng.topic, rng.partition, offset_of(m), m.key(), m.value(),
                    millis if kind else None,
                )  # fmt: skip


def _range_ends(ranges: Iterable[OffsetRange]) -> dict[str, dict[str, int]]:
    """Where the next batch starts: a range's end, even when its last offsets were gaps
    (transaction markers, compacted-away records), so a restart never re-reads them."""
    offsets: dict[str, dict[str, int]] = defaultdict(dict)
    for rng in ranges:
        key = str(rng.partition)
        offsets[rng.topic][key] = max(rng.end, offsets[rng.topic].get(key, 0))
    return dict(offsets)


def _next_offsets(records: Sequence[RawRecord]) -> dict[str, dict[str, int]]:
    offsets: dict[str, dict[str, int]] = defaultdict(dict)
    for r in records:
        key = str(r.partition)
        offsets[r.topic][key] = max(r.offset + 1, offsets[r.topic].get(key, 0))
    return dict(offsets)


# -- Debezium topics -------------------------------------------------------------------------


def _write_debezium(records: list[RawRecord], plan: SinkPlan, report: TaskReport) -> TaskReport:
    decoded = decode_records(records, plan.decoder)
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
                schema_b64=to_base64(proposed),
                primary_key=tuple(segment.primary_key),
            )
        )
        return
    target = _follow_schema(meta, proposed, acc)
    if target is None:
        return
    acc.commit(stage_changes(target, changes(target, segment.rows)))
    acc.count(
        segment.table,
        TableCounts(rows=segment.rows.num_rows, upserts=segment.upserts, deletes=segment.deletes),
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


def _write_json(records: list[RawRecord], plan: SinkPlan, report: TaskReport) -> TaskReport:
    acc = _Accumulator(report)
    by_topic: dict[str, list[RawRecord]] = defaultdict(list)
    for r in records:
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
                    NewTable(table=table, kind="append", schema_b64=to_base64(rows.schema))
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
        new = TableCounts(
            rows=old.rows + counts.rows,
            upserts=old.upserts + counts.upserts,
            deletes=old.deletes + counts.deletes,
        )
        self._add(counts={**self.report.counts, table: new})

    def new_table(self, table: NewTable) -> None:
        if all(t.table != table.table for t in self.report.new_tables):
            self._add(new_tables=[*self.report.new_tables, table])

    def evolve(self, table: str, schema: pa.Schema) -> None:
        self._add(evolved={**self.report.evolved, table: to_base64(schema)})

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
        self._add(dead_letters=self.report.dead_letters + len(letters))
