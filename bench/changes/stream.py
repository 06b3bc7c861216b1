"""The change stream's throughput against the ingest job it follows (issue 50's benchmark, its
second half): can ``spark.readStream.format("lakestream")`` keep up with the stream that fills
the table? Goal: the change stream covers source events at >= 1.0x the ingest job's rate.

One run starts PostgreSQL (the catalog), Apache Kafka and one local Spark session
(``local[2]``) as ``bench/ingest/run.py`` does, and produces its workload: ``--events``
Debezium change events over ``--keys`` keys (every key created once, then random updates). A
warm-up round on a small topic runs both pipelines once, unmeasured (Python workers, JIT).
Then each of ``--repeat`` rounds, one query at a time in the same session:

1. creates a fresh CDC table and times ``run_ingest`` over the whole topic (AvailableNow,
   ``--max-offsets`` per trigger, ``--buckets`` hash buckets), then checks the table;
2. times a change stream of that table from ``startingVersion`` 1 to the end (AvailableNow,
   ``--max-versions`` per trigger) into ``format("noop")``, from a new checkpoint;
3. checks that the stream's rows (Spark's input rows) equal ``Table.changes(1)``'s, and times
   in this process the catalog planning of those versions and ``Table.changes(1)`` itself, to
   split the stream's time into planning and deriving.

Re-ingesting per round, rather than ingesting once, pairs every stream with an ingest run of
the same minutes on a shared machine, so the per-round ratio cancels most of the load.

The sink is ``noop``: it runs the whole plan (every change row, every column, crosses from the
source's Python worker into the JVM) and writes nothing, so the time is the source's; Spark's
progress counts its input rows. ``foreachBatch(df.count())`` would run a second Spark job per
micro-batch, which prices Spark's plumbing rather than the feed.

An event makes one change row (an insert) or two (an update's pre- and post-image), and events
of one key inside a micro-batch of the ingest job fold into one change, so change rows/s and
events/s differ; the verdict uses source events covered per second (every event the versions
committed, over the stream's time) against the ingest job's events/s, both end to end: the
feed keeps up when it drains the versions at least as fast as the job makes them.

    python -m bench.changes.stream [--events 1000000] [--repeat 3] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.common import add_output_args, bench_server, emit_report, load_average, quiet_logging
from bench.common import scratch_dir as make_scratch_dir
from bench.ingest import pipelines
from bench.ingest.pipelines import BatchProgress, LakestreamSettings, Measurement, ProgressRecorder
from bench.ingest.report import Environment
from bench.ingest.tables import check_table, create_cdc_table
from bench.ingest.workload import Workload, decoder_config, generate, produce
from catalog import Catalog, Table
from catalog.changes import derive_changes, finish_changes, list_versions, plan_delta
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from ingest.spark_read import SOURCE_NAME, register
from ingest.spark_session import local_spark
from jobs.spark_env import spark_host

#: The issue's goal: the change stream's source events/s over the ingest job's.
GOAL = 1.0
_WARM_TOPIC = "dbserver1.public.warmup"
_TOPIC = "dbserver1.public.customers"
_DEAD_LETTERS = "bench.dead_letters"
#: Spark's per-micro-batch phases reported for the stream, in the order they run.
_PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class StreamPass:
    """One change stream over a table's versions."""

    measurement: Measurement
    """``events`` are the change rows Spark read."""
    versions: int
    source_events: int
    """The source events the versions committed."""

    @property
    def rows(self) -> int:
        return self.measurement.events

    @property
    def events_rate(self) -> float:
        return self.source_events / self.measurement.seconds

    @property
    def in_batch_events_rate(self) -> float | None:
        seconds = self.measurement.in_batch_seconds
        return self.source_events / seconds if seconds else None


@dataclass(frozen=True)
class InProcess:
    """The same versions' changes computed in this process, without Spark."""

    rows: int
    plan_seconds: float
    """``list_versions`` + ``plan_delta`` of every version: what the stream's driver does."""
    tasks: int
    derive_seconds: float
    """Every task's rows as the executors derive them (``derive_changes`` and
    ``finish_changes`` per version and partition), one after another on one thread."""
    changes_seconds: float
    """``Table.changes(1)``: planning and deriving every version's rows, one thread."""


@dataclass
class Round:
    ingest: Measurement
    stream: StreamPass
    local: InProcess

    @property
    def ratio(self) -> float:
        return self.stream.events_rate / self.ingest.rate

    @property
    def rows_ratio(self) -> float:
        return self.stream.measurement.rate / self.ingest.rate


@dataclass
class Results:
    workload: Workload
    produce_seconds: float
    settings: dict[str, Any]
    rounds: list[Round] = field(default_factory=list)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.changes.stream",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=250_000,
                        help="the ingest job's maxOffsetsPerTrigger")  # fmt: skip
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--max-versions", type=int, default=1,
                        help="the change stream's maxVersionsPerTrigger")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup-events", type=int, default=20_000)
    add_output_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(given)
    env = Environment(" ".join(["python -m bench.changes.stream", *given]))
    quiet_logging()
    with make_scratch_dir(args.workdir, keep=args.keep, prefix="bench-changes-stream-") as work:
        results = _run(args, env, work)
    emit_report(markdown(results, env, load_average()), args.markdown)
    return 0


def _run(args: argparse.Namespace, env: Environment, workdir: Path) -> Results:
    broker: ApacheKafka | None = None
    spark: SparkSession | None = None
    with bench_server(workdir / "warehouse") as server:
        env.pg_version = server.pg_version
        try:
            broker = ApacheKafka.start()
            bootstrap = broker.bootstrap_servers
            for name in (_WARM_TOPIC, _TOPIC):
                create_topic(bootstrap, name, args.partitions)
            warm = generate(args.warmup_events, max(1, args.warmup_events // 5), args.partitions,
                            embedded_schema=False, seed=1)  # fmt: skip
            produce(bootstrap, _WARM_TOPIC, warm)
            progress(f"generating and producing {args.events:,} events")
            workload = generate(args.events, args.keys, args.partitions, embedded_schema=False)
            produced = produce(bootstrap, _TOPIC, workload)
            progress(f"produced in {produced.seconds:.1f}s, end offsets {produced.end_offsets}")
            results = Results(workload, produced.seconds, _settings(args))
            spark = local_spark("lakestream-bench-changes-stream", host=spark_host())
            register(spark)
            bench = _Bench(
                args, workdir, spark, catalog=server.catalog, dsn=server.dsn, bootstrap=bootstrap
            )
            progress("warm-up round (not measured)")
            bench.round("warmup", _WARM_TOPIC, warm)
            for number in range(args.repeat):
                found = bench.round(f"r{number}", _TOPIC, workload)
                results.rounds.append(found)
                progress(
                    f"round {number}: ingest {found.ingest.rate:,.0f} events/s; stream "
                    f"{found.stream.measurement.rate:,.0f} change rows/s, "
                    f"{found.stream.events_rate:,.0f} events/s; ratio {found.ratio:.2f}x"
                )
            return results
        finally:
            if spark is not None:
                spark.stop()
            if broker is not None:
                broker.stop()


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_offsets": args.max_offsets,
        "buckets": args.buckets,
        "max_versions": args.max_versions,
        "repeat": args.repeat,
        "warmup_events": args.warmup_events,
        "partitions": args.partitions,
    }


class _Bench:
    """One session's pipelines, one query at a time."""

    def __init__(
        self,
        args: argparse.Namespace,
        workdir: Path,
        spark: SparkSession,
        *,
        catalog: Catalog,
        dsn: str,
        bootstrap: str,
    ) -> None:
        self.args = args
        self.workdir = workdir
        self.spark = spark
        self.catalog = catalog
        self.dsn = dsn
        self.bootstrap = bootstrap
        self.recorder = ProgressRecorder()
        spark.streams.addListener(self.recorder)

    def round(self, tag: str, topic: str, workload: Workload) -> Round:
        """Ingest ``topic`` into a fresh table, check it, then stream its changes and check
        them."""
        table = f"bench.customers_{tag}"
        schema_id = create_cdc_table(self.catalog, table, self.args.buckets)
        progress(f"{tag}: ingest")
        ingest = pipelines.lakestream(
            self.spark,
            self.recorder,
            self.catalog,
            bootstrap=self.bootstrap,
            topic=topic,
            expected=workload.events,
            max_offsets=self.args.max_offsets,
            settings=LakestreamSettings(
                table=table,
                dead_letter_table=_DEAD_LETTERS,
                decoder=decoder_config({topic: table}),
                hash_buckets=self.args.buckets,
            ),
            workdir=self.workdir,
            job=f"ingest-{tag}",
        )
        check = check_table(
            self.catalog,
            table=table,
            dead_letter_table=_DEAD_LETTERS,
            job=f"ingest-{tag}",
            workload=workload,
            expected_schema_id=schema_id,
        )
        if not check.ok:
            raise RuntimeError(f"the ingested table is wrong: {check}")
        progress(f"{tag}: change stream of {check.versions} versions")
        stream = self.stream(tag, table, workload.events)
        local = in_process(self.catalog.load_table(table))
        if local.rows != stream.rows:
            raise RuntimeError(
                f"{table}: the stream read {stream.rows:,} change rows, "
                f"Table.changes(1) has {local.rows:,}"
            )
        return Round(ingest, stream, local)

    def stream(self, tag: str, table: str, events: int) -> StreamPass:
        """The table's changes from version 1 into ``noop``; rows are Spark's input rows."""
        name = f"changes-{tag}"
        frame = (
            self.spark.readStream.format(SOURCE_NAME)
            .option("catalog", self.dsn)
            .option("readChangeFeed", "true")
            .option("startingVersion", "1")
            .option("maxVersionsPerTrigger", str(self.args.max_versions))
            .load(table)
        )
        writer = frame.writeStream.format("noop").option(
            "checkpointLocation", str(self.workdir / name / "checkpoint")
        )
        seconds, batches, used = pipelines.run_query(writer, name, self.recorder)
        rows = sum(b.rows for b in batches)
        versions = self.catalog.load_table(table).current_version()
        measured = Measurement("change stream", rows, seconds, batches, {"cpu": used})
        return StreamPass(measured, versions, events)


def in_process(table: Table) -> InProcess:
    """The stream's work without Spark: the driver's planning of every version (one catalog
    connection, as the stream's reader holds), the executors' deriving of every task, and
    ``Table.changes(1)`` whole (whose row count the stream must match)."""
    store, meta = table.catalog.store, table.meta
    started = time.perf_counter()
    entries = list_versions(store, meta, 1, table.current_version())
    deltas = [d for entry in entries for d in plan_delta(store, meta, entry).by_bucket(meta)]
    plan_seconds = time.perf_counter() - started
    started = time.perf_counter()
    derived = sum(finish_changes(meta, derive_changes(meta, d)).num_rows for d in deltas)
    derive_seconds = time.perf_counter() - started
    started = time.perf_counter()
    rows = table.changes(1).num_rows
    changes_seconds = time.perf_counter() - started
    if derived != rows:
        raise RuntimeError(f"the tasks derived {derived:,} rows, Table.changes(1) {rows:,}")
    return InProcess(rows, plan_seconds, len(deltas), derive_seconds, changes_seconds)


# ------------------------------------------------------------------------------- report


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    return f"{min(values):{fmt}}-{max(values):{fmt}}" if values else "-"


def _cpu_us(measured: Measurement, per: int) -> str:
    used = measured.notes.get("cpu", {})
    total = sum(used.get(k, 0.0) for k in ("driver", "jvm", "python workers"))
    return f"{total / per * 1e6:.1f}" if per else "-"


def markdown(results: Results, env: Environment, load_at_end: str) -> str:
    w, s, rounds = results.workload, results.settings, results.rounds
    lines = [*env.lines(load_at_end), ""]
    lines += [
        f"Workload: {w.events:,} schemaless Debezium JSON change events over "
        f"{w.distinct_keys:,} keys ({w.distinct_keys:,} creates, "
        f"{w.events - w.distinct_keys:,} updates) on {w.partitions} partitions, produced in "
        f"{results.produce_seconds:.1f} s. Spark `local[2]`, AvailableNow throughout; ingest: "
        f"`run_ingest`, maxOffsetsPerTrigger {s['max_offsets']:,}, hash_buckets "
        f"{s['buckets']}, a fresh table per round; change stream: startingVersion 1, "
        f'maxVersionsPerTrigger {s["max_versions"]}, `format("noop")`, a new checkpoint per '
        f"round. {len(rounds)} measured round(s) after one unmeasured warm-up round "
        f"({s['warmup_events']:,} events).",
        "",
        "| per round | median | spread (min-max) | rounds |",
        "| --- | ---: | ---: | --- |",
    ]
    rows: list[tuple[str, list[float], str]] = [
        ("ingest events/s (end to end)", [r.ingest.rate for r in rounds], ",.0f"),
        ("ingest events/s (inside batches)", [r.ingest.in_batch_rate or 0 for r in rounds], ",.0f"),
        ("stream change rows/s (end to end)", [r.stream.measurement.rate for r in rounds], ",.0f"),
        ("stream source events/s (end to end)", [r.stream.events_rate for r in rounds], ",.0f"),
        (
            "stream source events/s (inside batches)",
            [r.stream.in_batch_events_rate or 0 for r in rounds],
            ",.0f",
        ),
        ("**stream events/s / ingest events/s** (end to end)", [r.ratio for r in rounds], ".2f"),
        ("stream change rows/s / ingest events/s", [r.rows_ratio for r in rounds], ".2f"),
        (
            "stream / ingest, inside batches (events/s)",
            [(r.stream.in_batch_events_rate or 0) / (r.ingest.in_batch_rate or 1) for r in rounds],
            ".2f",
        ),
        ("ingest seconds", [r.ingest.seconds for r in rounds], ".2f"),
        ("stream seconds", [r.stream.measurement.seconds for r in rounds], ".2f"),
    ]
    for label, values, fmt in rows:
        each = ", ".join(f"{v:{fmt}}" for v in values)
        lines.append(f"| {label} | {_median(values):{fmt}} | {_spread(values, fmt)} | {each} |")
    if rounds:
        lines += ["", *_detail(rounds)]
    return "\n".join(lines) + "\n"


def _detail(rounds: list[Round]) -> list[str]:
    first = rounds[0]
    ratio = _median([r.ratio for r in rounds])
    verdict = "met" if ratio >= GOAL else "missed"
    stream_batches = [b for r in rounds for b in r.stream.measurement.batches if b.rows]
    ingest_batches = [b for r in rounds for b in r.ingest.batches if b.rows]
    lines = [
        f"- Verdict (source events/s of the stream over the ingest job's, end to end, median "
        f"of the paired rounds): **{ratio:.2f}x**, goal >= {GOAL:.1f}x: **{verdict}**",
        f"- change rows: {first.stream.rows:,} from {first.stream.versions} versions "
        f"({first.stream.rows / first.stream.source_events:.2f} per event); the stream's rows "
        "equal `Table.changes(1)`'s in every round",
        f"- micro-batches with rows: ingest {first.ingest.data_batches}, stream "
        f"{first.stream.measurement.data_batches}",
        f"- CPU µs (driver + JVM + Python workers) per event: ingest "
        f"{_cpu_us(first.ingest, first.ingest.events)}, stream "
        f"{_cpu_us(first.stream.measurement, first.stream.source_events)} (round 0); CPU s by "
        f"component, ingest {first.ingest.notes.get('cpu')}, stream "
        f"{first.stream.measurement.notes.get('cpu')}",
        "",
        "Median ms per micro-batch with rows, by Spark phase (all rounds):",
        "",
        "| query | batches | " + " | ".join(_PHASES) + " | triggerExecution |",
        "| --- | ---: | " + " | ".join("---:" for _ in _PHASES) + " | ---: |",
        _phase_row("ingest", ingest_batches),
        _phase_row("change stream", stream_batches),
        "",
        "In this process, without Spark (median of the rounds): planning every version "
        f"(`list_versions` + `plan_delta`, {first.local.tasks} tasks) "
        f"{_median([r.local.plan_seconds for r in rounds]) * 1000:,.0f} ms; deriving every "
        f"task's rows as the executors do, one task after another on one thread "
        f"{_median([r.local.derive_seconds for r in rounds]):.2f} s; "
        f"`Table.changes(1)` (planning + deriving, one thread) "
        f"{_median([r.local.changes_seconds for r in rounds]):.2f} s = "
        f"{_median([r.local.rows / r.local.changes_seconds for r in rounds]):,.0f} change "
        "rows/s.",
    ]
    return lines


def _phase_row(name: str, batches: list[BatchProgress]) -> str:
    cells = [
        f"{_median([b.duration_ms.get(p, 0) for b in batches]):,.0f}"
        for p in (*_PHASES, "triggerExecution")
    ]
    return f"| {name} | {len(batches)} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
