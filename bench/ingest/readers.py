"""The two ``source.reader`` s of the ingest job against bare Spark, paired, on Apache Kafka.

Per round, one after another in one Spark session (order rotated by round), over the same
topic: bare Spark (Spark's built-in Kafka source, ``format("kafka")``, ->
``writeStream.format("parquet")``, Trigger.AvailableNow, the same ``maxOffsetsPerTrigger``),
lakestream with ``source.reader: python`` and lakestream with ``source.reader: spark``
(``run_ingest`` into a CDC table created up front, checked after each run), then a raw
confluent-kafka consume. A warm-up round on a small topic runs first, not measured.

Reported: each pipeline's median events/s end to end, and each reader's ratio to bare Spark of
the same round: the geometric mean of the rounds' ratios with a 95% interval (Student t over
the log ratios), so the load of the shared machine, which moves between rounds, cancels out
of each pair.

    python -m bench.ingest.readers --rounds 5 --markdown out.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.common import bench_server, load_average, scratch_dir
from bench.ingest import pipelines
from bench.ingest.compare import _t975
from bench.ingest.pipelines import LakestreamSettings, Measurement, ProgressRecorder
from bench.ingest.report import Environment
from bench.ingest.tables import check_table, create_cdc_table
from bench.ingest.workload import Workload, check_encoding, decoder_config, generate, produce
from catalog import Catalog
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from ingest.kafka.spark_source import CONNECTOR_VERSION, SourceReader, ensure_connector_jars
from ingest.spark_session import local_spark
from jobs.spark_env import spark_host

_DEAD_LETTERS = "bench.dead_letters"
_WARM_TOPIC = "dbserver1.public.warmup"
_TOPIC = "dbserver1.public.customers"
BARE = "bare Spark (format kafka) -> Parquet"
PIPELINES = (BARE, "lakestream, reader python", "lakestream, reader spark")
RAW = "raw confluent-kafka consume"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup-events", type=int, default=20_000)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--markdown", type=Path)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = " ".join(
        ["python -m bench.ingest.readers", *(sys.argv[1:] if argv is None else argv)]
    )
    env = Environment(command)
    check_encoding()
    with scratch_dir(args.workdir, keep=args.keep, prefix="bench-readers-") as workdir:
        rounds, raw = _run(args, workdir, env)
    text = markdown(rounds, raw, args, env, load_average())
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


Round = dict[str, Measurement]


def _run(
    args: argparse.Namespace, workdir: Path, env: Environment
) -> tuple[list[Round], list[Measurement]]:
    with bench_server(workdir / "warehouse") as server:
        env.pg_version = server.pg_version
        broker = ApacheKafka.start()
        spark = None
        try:
            bootstrap = broker.bootstrap_servers
            for name in (_WARM_TOPIC, _TOPIC):
                create_topic(bootstrap, name, args.partitions)
            warm = generate(args.warmup_events, max(1, args.warmup_events // 5), args.partitions,
                            embedded_schema=False, seed=1)  # fmt: skip
            produce(bootstrap, _WARM_TOPIC, warm)
            progress(f"producing {args.events:,} events")
            workload = generate(args.events, args.keys, args.partitions, embedded_schema=False)
            produced = produce(bootstrap, _TOPIC, workload)
            progress(f"produced in {produced.seconds:.1f}s, end offsets {produced.end_offsets}")
            spark = _session()
            recorder = ProgressRecorder()
            spark.streams.addListener(recorder)
            bench = _Bench(
                args,
                workdir,
                spark=spark,
                recorder=recorder,
                catalog=server.catalog,
                bootstrap=bootstrap,
            )
            progress("warm-up round (not measured)")
            bench.round(_WARM_TOPIC, warm, "warmup", order=0)
            rounds, raw = [], []
            for n in range(args.rounds):
                rounds.append(bench.round(_TOPIC, workload, f"r{n}", order=n))
                raw.append(pipelines.raw_consume(bootstrap, _TOPIC, args.partitions, args.events))
                progress(f"  raw consume: {raw[-1].rate:,.0f} events/s")
            return rounds, raw
        finally:
            if spark is not None:
                spark.stop()
            broker.stop()


def _session() -> SparkSession:
    """The local session with Spark's Kafka source on its classpath."""
    return local_spark("lakestream-bench-readers", jars=ensure_connector_jars(), host=spark_host())


class _Bench:
    def __init__(
        self,
        args: argparse.Namespace,
        workdir: Path,
        *,
        spark: SparkSession,
        recorder: ProgressRecorder,
        catalog: Catalog,
        bootstrap: str,
    ) -> None:
        self.args, self.workdir, self.spark, self.recorder = args, workdir, spark, recorder
        self.catalog, self.bootstrap = catalog, bootstrap

    def round(self, topic: str, workload: Workload, tag: str, *, order: int) -> Round:
        steps = self._steps(topic, workload, tag)
        shift = order % len(steps)
        measured: Round = {}
        for name, step in steps[shift:] + steps[:shift]:
            measured[name] = step()
            progress(f"{tag} {name}: {measured[name].rate:,.0f} events/s end to end")
        return measured

    def _steps(
        self, topic: str, workload: Workload, tag: str
    ) -> list[tuple[str, Callable[[], Measurement]]]:
        common: dict[str, Any] = {
            "bootstrap": self.bootstrap,
            "topic": topic,
            "expected": workload.events,
            "max_offsets": self.args.max_offsets,
            "workdir": self.workdir,
        }

        def bare() -> Measurement:
            return pipelines.bare_parquet(
                self.spark, self.recorder, name=f"bare-{tag}", spark_source=True, **common
            )

        def lakestream(reader: SourceReader) -> Measurement:
            table = f"bench.{tag}_{reader.value}"
            schema_id = create_cdc_table(self.catalog, table, self.args.buckets)
            settings = LakestreamSettings(table, _DEAD_LETTERS, decoder_config({topic: table}),
                                          self.args.buckets)  # fmt: skip
            job = f"ingest-{tag}-{reader.value}"
            measured = pipelines.lakestream(
                self.spark, self.recorder, self.catalog, settings=settings, job=job,
                reader=reader, **common,
            )  # fmt: skip
            check = check_table(
                self.catalog,
                table=table,
                dead_letter_table=_DEAD_LETTERS,
                job=job,
                workload=workload,
                expected_schema_id=schema_id,
            )
            if not check.ok:
                raise RuntimeError(f"{job}: the table is wrong: {check}")
            return measured

        return [
            (BARE, bare),
            (PIPELINES[1], lambda: lakestream(SourceReader.PYTHON)),
            (PIPELINES[2], lambda: lakestream(SourceReader.SPARK)),
        ]


def ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The geometric mean of paired ratios and its 95% interval (t over the log ratios)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = _t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def markdown(
    rounds: list[Round],
    raw: list[Measurement],
    args: argparse.Namespace,
    env: Environment,
    load_at_end: str,
) -> str:
    lines = [
        *env.lines(load_at_end),
        f"- Spark's Kafka connector spark-sql-kafka-0-10_2.13 {CONNECTOR_VERSION}",
        f"- {args.events:,} events, {args.keys:,} keys, {args.partitions} partitions, "
        f"maxOffsetsPerTrigger {args.max_offsets:,}, {args.rounds} rounds",
        "",
        "| pipeline | median events/s end to end | rounds | CPU µs/event (median) "
        "| vs bare Spark, geometric mean (95%) |",
        "| --- | ---: | --- | ---: | --- |",
    ]
    bare = [r[BARE].rate for r in rounds]
    for name in (*PIPELINES, RAW):
        items = raw if name == RAW else [r[name] for r in rounds]
        rates = [m.rate for m in items]
        cpu = statistics.median(_cpu_per_event(m) for m in items)
        if name == BARE:
            vs = "1"
        else:
            mean, low, high = ratio_interval([a / b for a, b in zip(rates, bare, strict=True)])
            vs = f"**{mean:.2f}x** ({low:.2f}-{high:.2f})"
        per_round = ", ".join(f"{x:,.0f}" for x in rates)
        lines.append(
            f"| {name} | {statistics.median(rates):,.0f} | {per_round} | {cpu:.1f} | {vs} |"
        )
    return "\n".join(lines) + "\n"


def _cpu_per_event(measured: Measurement) -> float:
    used = measured.notes.get("cpu") or {}
    total = sum(float(v) for v in used.values()) if isinstance(used, dict) else 0.0
    return total / measured.events * 1e6 if measured.events else 0.0


if __name__ == "__main__":
    raise SystemExit(main())
