"""Where one executor task of the lakestream job spends its time, outside Spark, on one core.

A task of the job gets one row naming a partition's offset range (the source runs with
``emit=ranges``); :func:`ingest.sink.task.write_task` reads the range from Kafka itself
(``ingest.kafka.reader.read_messages``), decodes it (``ingest.debezium.decode_records``),
conforms the rows and writes one sorted merge-run file per bucket (``catalog.writes.changes`` /
``stage_changes``). Here the same functions run in this process on ``records`` events of
partition 0 of the benchmark's topic:

1. reading the range alone (Kafka -> record chunks, ``read_chunks``);
2. ``write_task`` end to end on the range (best of ``repeat``);
3. its stages one by one, calling the same functions ``write_task`` calls (best of ``repeat``
   each), plus ``orjson.loads`` of every value alone as the floor of any JSON decoder;
4. ``write_task`` under cProfile, for the functions with the most own time (cProfile inflates
   small pure-Python calls: read it for where, not how much).

Times are CPU seconds of this process (``time.process_time``: every thread, librdkafka's
included), which a busy shared machine inflates much less than wall time.

The files written go to a scratch table and are never committed.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import orjson
import pyarrow as pa

from catalog import Catalog, TableNotFoundError
from catalog.meta import TableMeta
from catalog.writes import changes, stage_changes
from ingest.debezium import DecoderConfig, decode_chunks
from ingest.formats import SourceFormat
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import parse_options
from ingest.kafka.schema import RANGE_SCHEMA, arrow_schema, range_batch, ranges_of
from ingest.sink.plan import SinkPlan
from ingest.sink.report import TaskReport, read_report
from ingest.sink.task import DEAD_LETTER_SCHEMA, read_chunks, write_task

T = TypeVar("T")

_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class TaskProfile:
    records: int
    read_seconds: float
    task_seconds: float
    profiled_seconds: float
    stages: list[tuple[str, float]] = field(default_factory=list)
    """(label, CPU seconds) of write_task's stages run one by one."""
    top: list[tuple[str, int, float, float]] = field(default_factory=list)
    """(function, calls, own seconds, cumulative seconds) by own time, under cProfile."""
    files: int = 0

    @property
    def read_rate(self) -> float:
        return self.records / self.read_seconds

    @property
    def task_rate(self) -> float:
        return self.records / self.task_seconds


def profile_task(
    catalog: Catalog,
    *,
    bootstrap: str,
    topic: str,
    table: str,
    dead_letter_table: str,
    decoder: DecoderConfig,
    records: int,
    repeat: int = 3,
) -> TaskProfile:
    options = parse_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    )
    rng = OffsetRange(topic, 0, 0, records)
    started = time.process_time()
    count = sum(len(chunk) for chunk in read_chunks([rng], options))
    read_seconds = time.process_time() - started
    batches = [range_batch([rng], arrow_schema(RANGE_SCHEMA))]
    plan = SinkPlan(
        source_format=SourceFormat.DEBEZIUM,
        decoder=decoder,
        tables={table: catalog.load_table(table).meta},
        dead_letters=_dead_letter_meta(catalog, dead_letter_table),
        batch_id=0,
        writer="bench-profile",
        log_level="WARNING",
        kafka=options,
    )
    best = float("inf")
    report = None
    for _ in range(repeat):
        started = time.process_time()
        report = _run(batches, plan)
        best = min(best, time.process_time() - started)
    if report is None or report.records != count or report.dead_letters:
        raise RuntimeError(f"profiled task did not write all {count} records: {report}")
    stages = _stages(batches, plan, table, repeat)
    profiler = cProfile.Profile()
    started = time.process_time()
    profiler.enable()
    _run(batches, plan)
    profiler.disable()
    profiled = time.process_time() - started
    return TaskProfile(
        records=count,
        read_seconds=read_seconds,
        task_seconds=best,
        profiled_seconds=profiled,
        stages=stages,
        top=_top(pstats.Stats(profiler), 12),
        files=len(report.files),
    )


def _best(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    """Least CPU seconds of ``repeat`` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    assert result is not None
    return best, result


def _parse_all(values: Sequence[bytes]) -> int:
    """Parse every value and drop it at once, as the decoder does (keeping 62k parsed dicts
    alive would cost more: allocation and cyclic GC passes)."""
    loads = orjson.loads
    for value in values:
        loads(value)
    return len(values)


def _stages(
    batches: Sequence[pa.RecordBatch], plan: SinkPlan, table: str, repeat: int
) -> list[tuple[str, float]]:
    """The steps of ``write_task`` for a Debezium batch of one table, timed one by one."""
    meta = plan.tables[table]
    assert plan.kafka is not None
    ranges = ranges_of(batches[0])
    kafka = plan.kafka
    convert, chunks = _best(repeat, lambda: list(read_chunks(ranges, kafka)))
    values = [value or b"" for chunk in chunks for value in chunk.values]
    parse, _ = _best(repeat, lambda: _parse_all(values))
    decode, decoded = _best(repeat, lambda: decode_chunks(chunks, plan.decoder))
    (segment,) = decoded.tables
    conform, rows = _best(repeat, lambda: changes(meta, segment.rows))
    write, _ = _best(repeat, lambda: stage_changes(meta, rows))
    return [
        ("read the range from Kafka into record chunks (`read_chunks`)", convert),
        ("decode (`decode_chunks`: parse, route, collect, build Arrow)", decode),
        ("  for reference: `orjson.loads` of every value alone", parse),
        ("conform rows to the table (`catalog.writes.changes`)", conform),
        ("sort, split by bucket, write Parquet + fsync (`stage_changes`)", write),
    ]


def _run(batches: Sequence[pa.RecordBatch], plan: SinkPlan) -> TaskReport:
    out: Iterator[pa.RecordBatch] = write_task(iter(batches), plan)
    row = next(out)
    return read_report(*(row.column(c)[0].as_py() for c in ("report", "ranks", "placed")))


def _dead_letter_meta(catalog: Catalog, name: str) -> TableMeta:
    try:
        return catalog.load_table(name).meta
    except TableNotFoundError:
        return catalog.create_table(name, DEAD_LETTER_SCHEMA).meta


def _stats_rows(stats: pstats.Stats) -> dict[tuple[str, int, str], tuple[int, float, float]]:
    """(file, line, function) -> (calls, own seconds, cumulative seconds)."""
    raw = stats.stats  # type: ignore[attr-defined]
    return {key: (value[1], value[2], value[3]) for key, value in raw.items()}


def _top(stats: pstats.Stats, count: int) -> list[tuple[str, int, float, float]]:
    rows = _stats_rows(stats)
    ranked = sorted(rows.items(), key=lambda item: item[1][1], reverse=True)[:count]
    return [
        (f"{_short(path)}:{line}({name})", calls, own, cum)
        for (path, line, name), (calls, own, cum) in ranked
    ]


def _short(path: str) -> str:
    for marker in ("/site-packages/", f"{_ROOT}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path
