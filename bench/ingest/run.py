"""Ingest throughput: Debezium JSON on Kafka -> committed CDC rows/s, against two baselines.

One run starts PostgreSQL (the catalog), Apache Kafka (the broker) and one local Spark session
(``local[2]``), produces ``--events`` Debezium change events over ``--keys`` keys into a
``--partitions``-partition topic, and then measures, one after another (never in parallel):

1. raw confluent-kafka consume of the topic (``--raw-repeat`` times);
2. bare Spark: the ``lakestream-kafka`` source -> ``writeStream.format("parquet")``;
3. the same with Spark's ``from_json`` decoding the envelope (reference, not a goal);
4. the Spark skeleton of the job: ``foreachBatch`` + ``mapInArrow`` that only counts;
5. the lakestream ingest job (``ingest.job.run_ingest``) into a CDC table; then the table is
   checked (rows = distinct keys, sampled keys hold their last values, no dead letters).

Every Spark pipeline runs once on a small warm-up topic first (not measured). Afterwards one
executor task is profiled outside Spark (``task_profile.py``). See README.md beside this file.

    python -m bench.ingest.run [--events 1000000] [--envelope schemaless|schema]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from bench.common import bench_server, load_average, scratch_dir
from bench.ingest import pipelines, report
from bench.ingest.pipelines import LakestreamSettings, Measurement, ProgressRecorder
from bench.ingest.tables import check_table, create_cdc_table
from bench.ingest.task_profile import profile_task
from bench.ingest.workload import check_encoding, decoder_config, generate, produce
from catalog import Catalog
from catalog.logs import EVENT_ATTRIBUTE, ROOT_LOGGER, structured_handler
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from ingest.spark_session import local_spark
from jobs.spark_env import spark_host

_DEAD_LETTERS = "bench.dead_letters"
_WARM_TOPIC = "dbserver1.public.warmup"
_TOPIC = "dbserver1.public.customers"
#: Log events of the job kept for the report.
_KEPT_EVENTS = frozenset({"batch_committed", "batch_empty", "table_created_from_stream"})


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class LogCapture(logging.Handler):
    """Keeps the job's per-batch events; everything goes to a file too."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, EVENT_ATTRIBUTE, None)
        if isinstance(fields, dict) and fields.get("event") in _KEPT_EVENTS:
            self.events.append(dict(fields))

    def by_job(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for entry in self.events:
            if entry.get("event") == "batch_committed":
                out.setdefault(str(entry.get("job")), []).append(entry)
        return out


def configure_logging(capture: LogCapture, sink: TextIO) -> None:
    """INFO and up (``batch_committed`` is INFO) as JSON lines into ``sink``, and captured."""
    lakestream = logging.getLogger(ROOT_LOGGER)
    lakestream.addHandler(structured_handler(json=True, stream=sink))
    lakestream.addHandler(capture)
    lakestream.setLevel(logging.INFO)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingest.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--envelope", choices=("schemaless", "schema"), default="schemaless",
                        help="schemaless payloads (schema given to the decoder) or the "
                        "embedded Connect schema in every message")  # fmt: skip
    parser.add_argument("--max-offsets", type=int, default=250_000,
                        help="maxOffsetsPerTrigger of every Spark pipeline")  # fmt: skip
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--new-table", action="store_true",
                        help="let the job create its table (its first batch is then decoded "
                        "twice) instead of creating it up front")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="measured rounds of the Spark "
                        "pipelines (order rotates each round)")  # fmt: skip
    parser.add_argument("--raw-repeat", type=int, default=3)
    parser.add_argument("--warmup-events", type=int, default=20_000)
    parser.add_argument("--skip", default="",
                        help="comma list of: from_json, skeleton, profile")  # fmt: skip
    parser.add_argument("--profile-records", type=int, default=0,
                        help="events in the profiled task (default: one task's share of a "
                        "batch, max-offsets / partitions)")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python -m bench.ingest.run", *(sys.argv[1:] if argv is None else argv)])
    env = report.Environment(command)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    check_encoding()
    capture = LogCapture()
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="bench-ingest-") as workdir,
        (workdir / "driver-log.jsonl").open("w") as log_file,
    ):
        configure_logging(capture, log_file)
        results = _run(args, env, skip, workdir, capture)
    text = report.markdown(results, env, load_average())
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(_raw(results), indent=2, default=str))
    return 0


def _run(
    args: argparse.Namespace,
    env: report.Environment,
    skip: set[str],
    workdir: Path,
    capture: LogCapture,
) -> report.Results:
    embedded = args.envelope == "schema"
    broker: ApacheKafka | None = None
    spark: SparkSession | None = None
    with bench_server(workdir / "warehouse") as server:
        env.pg_version = server.pg_version
        catalog = server.catalog
        try:
            broker = ApacheKafka.start()
            bootstrap = broker.bootstrap_servers
            for name in (_WARM_TOPIC, _TOPIC):
                create_topic(bootstrap, name, args.partitions)
            warm = generate(args.warmup_events, max(1, args.warmup_events // 5), args.partitions,
                            embedded_schema=embedded, seed=1)  # fmt: skip
            produce(bootstrap, _WARM_TOPIC, warm)
            progress(f"generating and producing {args.events:,} events")
            workload = generate(args.events, args.keys, args.partitions, embedded_schema=embedded)
            produced = produce(bootstrap, _TOPIC, workload)
            progress(
                f"produced in {produced.seconds:.1f}s, mean value "
                f"{produced.mean_value_bytes:.0f} B, end offsets {produced.end_offsets}"
            )
            results = report.Results(
                workload,
                produced,
                {
                    "max_offsets": args.max_offsets,
                    "buckets": args.buckets,
                    "new_table": args.new_table,
                    "repeat": args.repeat,
                    "warmup_events": args.warmup_events,
                },
            )
            spark = local_spark("lakestream-bench-ingest", host=spark_host())
            bench = _Bench(args, skip, workdir, spark=spark, catalog=catalog, bootstrap=bootstrap)
            bench.warm_up(warm.events)
            for round_no in range(args.repeat):
                bench.measure_round(round_no, results)
            results.batch_logs = capture.by_job()
            if "profile" not in skip:
                records = args.profile_records or args.max_offsets // args.partitions
                records = min(records, produced.end_offsets[0])
                progress(f"profiling one executor task ({records:,} events)")
                create_cdc_table(catalog, "bench.profile_scratch", args.buckets)
                results.profile = profile_task(
                    catalog,
                    bootstrap=bootstrap,
                    topic=_TOPIC,
                    table="bench.profile_scratch",
                    dead_letter_table=_DEAD_LETTERS,
                    decoder=decoder_config({_TOPIC: "bench.profile_scratch"}),
                    records=records,
                )
            return results
        finally:
            if spark is not None:
                spark.stop()
            if broker is not None:
                broker.stop()


Step = tuple[str, Callable[[], Measurement]]


class _Bench:
    """The Spark pipelines of a run, in the same session, one after another."""

    def __init__(
        self,
        args: argparse.Namespace,
        skip: set[str],
        workdir: Path,
        *,
        spark: SparkSession,
        catalog: Catalog,
        bootstrap: str,
    ) -> None:
        self.args = args
        self.skip = skip
        self.workdir = workdir
        self.spark = spark
        self.catalog = catalog
        self.bootstrap = bootstrap
        self.recorder = ProgressRecorder()
        spark.streams.addListener(self.recorder)

    def steps(self, topic: str, expected: int, tag: str, table: str) -> list[Step]:
        common: dict[str, Any] = {
            "bootstrap": self.bootstrap,
            "topic": topic,
            "expected": expected,
            "max_offsets": self.args.max_offsets,
            "workdir": self.workdir,
        }
        spark, recorder = self.spark, self.recorder
        out: list[Step] = [
            ("bare", lambda: pipelines.bare_parquet(
                spark, recorder, name=f"bare-{tag}", **common)),
        ]  # fmt: skip
        if "from_json" not in self.skip:
            embedded = self.args.envelope == "schema"
            out.append(("from_json", lambda: pipelines.bare_parquet(
                spark, recorder, from_json=True, embedded_schema=embedded,
                name=f"from-json-{tag}", **common)))  # fmt: skip
        if "skeleton" not in self.skip:
            out.append(("skeleton", lambda: pipelines.skeleton(
                spark, recorder, name=f"skeleton-{tag}", **common)))  # fmt: skip
        settings = LakestreamSettings(
            table=table,
            dead_letter_table=_DEAD_LETTERS,
            decoder=decoder_config({topic: table}),
            hash_buckets=self.args.buckets,
        )
        out.append(("lakestream", lambda: pipelines.lakestream(
            spark, recorder, self.catalog, settings=settings, job=f"ingest-{tag}",
            **common)))  # fmt: skip
        return out

    def warm_up(self, events: int) -> None:
        """Every pipeline once on the small topic: worker start-up and JIT are not measured."""
        progress("warm-up round (not measured)")
        pipelines.raw_consume(self.bootstrap, _WARM_TOPIC, self.args.partitions, events)
        if not self.args.new_table:
            create_cdc_table(self.catalog, "bench.warmup", self.args.buckets)
        for name, step in self.steps(_WARM_TOPIC, events, "warmup", "bench.warmup"):
            progress(f"  warm-up {name}")
            step()

    def measure_round(self, round_no: int, results: report.Results) -> None:
        """Raw consume, then the Spark pipelines (order rotated by round), then the checks."""
        workload, args = results.workload, self.args
        for _ in range(args.raw_repeat):
            raw = pipelines.raw_consume(self.bootstrap, _TOPIC, args.partitions, workload.events)
            results.raw.append(raw)
            progress(f"raw consume: {raw.rate:,.0f} events/s")
        table = "bench.customers" if args.repeat == 1 else f"bench.customers_r{round_no}"
        schema_id = None if args.new_table else create_cdc_table(self.catalog, table, args.buckets)
        ordered = self.steps(_TOPIC, workload.events, f"r{round_no}", table)
        shift = round_no % len(ordered)
        for name, step in ordered[shift:] + ordered[:shift]:
            progress(f"round {round_no}: {name}")
            measured = step()
            getattr(results, name).append(measured)
            progress(
                f"  {measured.events:,} events in {measured.seconds:.2f}s = "
                f"{measured.rate:,.0f} events/s end to end; "
                f"{measured.in_batch_rate or 0:,.0f} events/s inside batches"
            )
            if name != "lakestream":
                continue
            check = check_table(
                self.catalog,
                table=table,
                dead_letter_table=_DEAD_LETTERS,
                job=str(measured.notes["job"]),
                workload=workload,
                expected_schema_id=schema_id,
            )
            results.checks.append(check)
            progress(f"  check: {check}")
            if not check.ok:
                raise RuntimeError(f"the lakestream table is wrong: {check}")


def _raw(results: report.Results) -> dict[str, Any]:
    def runs(items: list[Measurement]) -> list[dict[str, Any]]:
        return [
            {
                "name": m.name,
                "events": m.events,
                "seconds": m.seconds,
                "rate": m.rate,
                "in_batch_seconds": m.in_batch_seconds,
                "batches": [vars(b) for b in m.batches],
                "notes": m.notes,
            }
            for m in items
        ]

    profile = results.profile
    return {
        "workload": {
            "events": results.workload.events,
            "keys": results.workload.keys,
            "distinct_keys": results.workload.distinct_keys,
            "partitions": results.workload.partitions,
            "embedded_schema": results.workload.embedded_schema,
            "mean_value_bytes": results.produced.mean_value_bytes,
            "produce_seconds": results.produced.seconds,
        },
        "settings": dict(results.settings),
        "raw": runs(results.raw),
        "bare": runs(results.bare),
        "from_json": runs(results.from_json),
        "skeleton": runs(results.skeleton),
        "lakestream": runs(results.lakestream),
        "ratios": report.ratios(results),
        "checks": [vars(c) for c in results.checks],
        "batch_logs": results.batch_logs,
        "profile": None if profile is None else vars(profile),
    }


if __name__ == "__main__":
    sys.exit(main())
