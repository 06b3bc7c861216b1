"""``transactions: consistent`` against ``eventual``, side by side, over the same events.

The workload is the ingest benchmark's (``workload.py``: Debezium 3.x change events with the full
envelope, schemaless) spread over three tables (``key % 3``; each topic has 2 partitions by key)
and cut into source transactions of 1-20 consecutive events, as Debezium with
``provide.transaction.metadata=true`` writes them: each event carries its ``transaction`` block
(``id``, ``total_order``, ``data_collection_order``), and the transaction topic a BEGIN and an
END (with per-table counts) per transaction: on one partition, or with
``--transaction-partitions N`` spread over N by transaction id (as Debezium's keyed markers are
by the default partitioner), which the job then puts in commit order (issue 46).

Both modes read the same topics (the transaction topic included; ``eventual`` ignores it) into
tables created up front, one after another, never in parallel, ``--repeat`` rounds with the order
rotated; the report gives events/s end to end (``run_ingest`` start to end) per run and the ratio
of the medians (goal: consistent >= 0.9x eventual), and the CPU seconds each run's processes
used by component (``cpu.py``: driver, JVM, Spark's Python workers, broker). Checked after each
run: every table holds its distinct keys, no dead letters, and in consistent mode nothing is
left held.

Before the measured runs each mode ingests ``--warmup-events`` (default: as many as
``--events``) of another workload: the JVM compiles its hot paths over the first million or so
records. With a warm-up of 20,000 the first measured run paid for it (its JVM used ~7 s of CPU
against ~3.5 s in the later ones, whichever mode ran first), with 250,000 still ~5.5 s; eventual
runs first in round 0, so its median averaged a cold run with a warm one and the ratio read
0.04-0.08 too high.

    python -m bench.ingest.transactions [--events 1000000] [--transactions both|consistent|eventual]
        [--transaction-partitions 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import psycopg
from confluent_kafka import Producer

from bench.ingest import cpu
from bench.ingest.tables import create_cdc_table
from bench.ingest.workload import PRIMARY_KEY, Workload, _Encoder, generate, send, source_schema
from catalog import Catalog
from catalog.logs import ROOT_LOGGER, structured_handler
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from ingest.sink.held import held_table_name
from ingest.spark_session import local_spark
from ingest.transactions import TransactionMode
from jobs.localpg import LocalPostgres
from jobs.spark_env import spark_host

TABLES = 3
PARTITIONS = 2
PREFIX = "dbserver1"
_DB = "bench"
_LSN_BASE = 24_000_000_000
_LSN_STEP = 64


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def topic_of(table: int, prefix: str) -> str:
    return f"{prefix}.public.t{table}"


@dataclass(frozen=True)
class TxnWorkload:
    base: Workload
    prefix: str
    #: transaction number of each event
    txn_of: np.ndarray
    #: partitions of the transaction topic (markers spread by transaction id)
    marker_partitions: int = 1

    @property
    def transactions(self) -> int:
        return int(self.txn_of[-1]) + 1 if len(self.txn_of) else 0

    def distinct_keys(self, table: int) -> int:
        keys = self.base.key_of[self.base.key_of % TABLES == table]
        return len(np.unique(keys))


def make(
    events: int, keys: int, prefix: str, seed: int = 42, marker_partitions: int = 1
) -> TxnWorkload:
    base = generate(events, keys, PARTITIONS * TABLES, embedded_schema=False, seed=seed)
    rng = np.random.default_rng(seed + 1)
    sizes = rng.integers(1, 21, size=events // 5 + 2)
    starts = np.cumsum(sizes)
    txn_of = np.searchsorted(starts, np.arange(events), side="right")
    return TxnWorkload(base, prefix, txn_of.astype(np.int64), marker_partitions)


def messages(work: TxnWorkload) -> Iterator[tuple[str, int, bytes | None, bytes]]:
    """``(topic, partition, key, value)`` in source order: BEGIN, the events, END."""
    encoder = _Encoder(embedded_schema=False)
    keys = work.base.key_of.tolist()
    creates = work.base.is_create.tolist()
    txns = work.txn_of.tolist()
    marker_topic = f"{work.prefix}.transaction"
    i, n = 0, len(keys)
    while i < n:
        txn = txns[i]
        j = i
        while j < n and txns[j] == txn:
            j += 1
        tx_id = 1_000 + txn
        begin_lsn = _LSN_BASE + i * _LSN_STEP
        home = tx_id % work.marker_partitions
        yield marker_topic, home, None, b'{"status":"BEGIN","id":"%d:%d"}' % (tx_id, begin_lsn)
        counts = [0] * TABLES
        for order, e in enumerate(range(i, j), start=1):
            key = keys[e]
            table = key % TABLES
            counts[table] += 1
            lsn = _LSN_BASE + e * _LSN_STEP
            block = b'"transaction":{"id":"%d:%d","total_order":%d,"data_collection_order":%d}' % (
                tx_id, lsn, order, counts[table],
            )  # fmt: skip
            value = encoder.value(key, e, creates[e]).replace(b'"transaction":null', block, 1)
            yield (
                topic_of(table, work.prefix),
                (key // TABLES) % PARTITIONS,
                encoder.key(key),
                value,
            )
        end = {
            "status": "END",
            "id": f"{tx_id}:{_LSN_BASE + (j - 1) * _LSN_STEP + 8}",
            "event_count": j - i,
            "data_collections": [
                {"data_collection": f"public.t{t}", "event_count": c}
                for t, c in enumerate(counts)
                if c
            ],
            "ts_ms": 1_718_000_000_000 + j // 100,
        }
        yield marker_topic, home, None, orjson.dumps(end)
        i = j


def produce(bootstrap: str, work: TxnWorkload) -> float:
    """Send everything batched and wait for every acknowledgement."""
    started = time.perf_counter()
    batched = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                        "queue.buffering.max.messages": 1_000_000,
                        "queue.buffering.max.kbytes": 1_048_576})  # fmt: skip
    for topic, partition, key, value in messages(work):
        send(batched, topic, partition, key, value)
    if batched.flush(300) != 0:
        raise RuntimeError("the batched producer did not deliver everything")
    return time.perf_counter() - started


@dataclass(frozen=True)
class Run:
    mode: TransactionMode
    round: int
    seconds: float
    events: int
    batches: int
    cpu: dict[str, float]
    """CPU seconds by component (``cpu.COMPONENTS``)."""

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def run_mode(
    spark: object, catalog: Catalog, work: TxnWorkload, mode: TransactionMode, *,
    bootstrap: str, workdir: Path, label: str, max_offsets: int, buckets: int, round_no: int = -1,
) -> Run:  # fmt: skip
    namespace = f"{mode.value[0]}{label}"
    topics = [topic_of(t, work.prefix) for t in range(TABLES)]
    tables = {topic: f"{namespace}.t{t}" for t, topic in enumerate(topics)}
    for name in tables.values():
        create_cdc_table(catalog, name, buckets)
    schema = source_schema()
    config = IngestJobConfig(
        job=f"bench_{namespace}",
        bootstrap_servers=bootstrap,
        checkpoint=workdir / namespace / "checkpoint",
        dead_letter_table=f"{namespace}.dead_letters",
        topics=(*topics, f"{work.prefix}.transaction"),
        decoder=DecoderConfig(
            topic_tables=tables,
            schemas=dict.fromkeys(tables.values(), schema),
            primary_keys=dict.fromkeys(tables.values(), PRIMARY_KEY),
        ),
        hash_buckets=buckets,
        max_offsets_per_trigger=max_offsets,
        transactions=mode,
    )
    started, cpu_before = time.perf_counter(), cpu.snapshot()
    result = run_ingest(config, spark, catalog)
    seconds = time.perf_counter() - started
    used = cpu.delta(cpu_before, cpu.snapshot())
    check(catalog, work, config, tables, mode)
    return Run(mode, round_no, seconds, work.base.events, result.batches_committed, used)


def check(
    catalog: Catalog,
    work: TxnWorkload,
    config: IngestJobConfig,
    tables: dict[str, str],
    mode: TransactionMode,
) -> None:
    for t, name in enumerate(tables.values()):
        rows = catalog.load_table(name).scan(columns=["id"]).to_arrow().num_rows
        if rows != work.distinct_keys(t):
            raise AssertionError(f"{name}: {rows} rows, want {work.distinct_keys(t)}")
    dead = catalog.load_table(config.dead_letter_table).scan().to_arrow().num_rows
    if dead:
        raise AssertionError(f"{dead} dead letters")
    if mode is TransactionMode.CONSISTENT:
        held = catalog.load_table(held_table_name(config.job)).scan().to_arrow().num_rows
        if held:
            raise AssertionError(f"{held} events still held after the last END")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--transactions", choices=["both", "consistent", "eventual"],
                        default="both")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--transaction-partitions",
        type=int,
        default=1,
        help="partitions of the transaction topic (markers spread by id)",
    )
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--warmup-events", type=int,
                        help="events each mode ingests before the measured runs "
                             "(default: as many as --events)")  # fmt: skip
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--log", type=Path, help="the jobs' log lines (JSON) into this file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.warmup_events is None:
        args.warmup_events = args.events
    modes = (
        [TransactionMode.EVENTUAL, TransactionMode.CONSISTENT]
        if args.transactions == "both"
        else [TransactionMode(args.transactions)]
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-txn-"))
    if args.log:
        lakestream = logging.getLogger(ROOT_LOGGER)
        lakestream.addHandler(structured_handler(json=True, stream=args.log.open("w")))
        lakestream.setLevel(logging.INFO)
    pg = LocalPostgres.start()
    broker = ApacheKafka.start()
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {_DB}")
        catalog = Catalog.connect(pg.dsn(_DB), warehouse=workdir / "warehouse")
        bootstrap = broker.bootstrap_servers
        parts = args.transaction_partitions
        warm = make(args.warmup_events, max(1, args.warmup_events // 5), "warm", 1, parts)
        work = make(args.events, args.keys, PREFIX, marker_partitions=parts)
        for w in (warm, work):
            for t in range(TABLES):
                create_topic(bootstrap, topic_of(t, w.prefix), PARTITIONS)
            create_topic(bootstrap, f"{w.prefix}.transaction", w.marker_partitions)
            seconds = produce(bootstrap, w)
            progress(f"{w.prefix}: {w.base.events:,} events in {w.transactions:,} transactions "
                     f"produced in {seconds:.1f}s")  # fmt: skip
        spark = local_spark("lakestream-bench-txn", host=spark_host())
        common = {"bootstrap": bootstrap, "workdir": workdir, "max_offsets": args.max_offsets,
                  "buckets": args.buckets}  # fmt: skip
        for mode in modes:  # warm-up, not measured
            run_mode(spark, catalog, warm, mode, label="warm", **common)  # type: ignore[arg-type]
        runs: list[Run] = []
        for r in range(args.repeat):
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                progress(f"round {r}: {mode.value}")
                run = run_mode(spark, catalog, work, mode, label=f"r{r}", round_no=r, **common)  # type: ignore[arg-type]
                progress(f"  {run.rate:,.0f} events/s ({run.seconds:.1f}s, {run.batches} batches)")
                runs.append(run)
        print(report(runs, args, os.getloadavg()))
        spark.stop()  # type: ignore[attr-defined]
        catalog.close()
    finally:
        broker.stop()
        pg.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def report(runs: list[Run], args: argparse.Namespace, load: tuple[float, float, float]) -> str:
    lines = [
        f"command: python -m bench.ingest.transactions {' '.join(sys.argv[1:])}",
        f"events {args.events:,}, keys {args.keys:,}, tables {TABLES} x {PARTITIONS} partitions, "
        f"transactions of 1-20 events (transaction topic: {args.transaction_partitions} "
        f"partition(s)), maxOffsetsPerTrigger {args.max_offsets:,}, "
        f"buckets {args.buckets}, warm-up {args.warmup_events:,} events "
        f"a mode; load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "",
        "| mode | round | seconds | events/s | batches | CPU s: driver / JVM / workers / broker |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {r.mode.value} | {r.round} | {r.seconds:.1f} | {r.rate:,.0f} | {r.batches} | "
              f"{_cpu(r)} |" for r in runs]  # fmt: skip
    medians = {
        m: statistics.median(r.rate for r in runs if r.mode is m) for m in {r.mode for r in runs}
    }
    for mode, rate in sorted(medians.items()):
        lines.append(f"median {mode.value}: {rate:,.0f} events/s")
    if len(medians) == 2:
        ratio = medians[TransactionMode.CONSISTENT] / medians[TransactionMode.EVENTUAL]
        lines.append(f"consistent / eventual: {ratio:.2f}x (goal >= 0.9x)")
        lines.append(_cpu_over_eventual(runs))
    return "\n".join(lines)


def _cpu_over_eventual(runs: list[Run]) -> str:
    """CPU seconds a consistent run used over an eventual one, per component (medians).

    Why: on the benchmark's 2-core machine every CPU second either mode spends comes out of
    the other's share, so these say where consistent mode's cost is; they usually move less
    between runs than the events/s (the same code measured 0.78x and 0.87x half an hour
    apart), though a slow phase of the machine inflates them too."""
    parts = []
    for name in CPU_SHOWN:
        by_mode = {
            mode: statistics.median(r.cpu[name] for r in runs if r.mode is mode)
            for mode in (TransactionMode.CONSISTENT, TransactionMode.EVENTUAL)
        }
        extra = by_mode[TransactionMode.CONSISTENT] - by_mode[TransactionMode.EVENTUAL]
        parts.append(f"{name} {extra:+.1f}")
    return "CPU s of consistent over eventual (medians): " + ", ".join(parts)


#: The CPU components the report shows, in its order (``cpu.COMPONENTS`` but "other").
CPU_SHOWN = ("driver", "jvm", "python workers", "broker")


def _cpu(run: Run) -> str:
    parts = [run.cpu[name] for name in CPU_SHOWN]
    return " / ".join(f"{seconds:.1f}" for seconds in parts)


if __name__ == "__main__":
    sys.exit(main())
