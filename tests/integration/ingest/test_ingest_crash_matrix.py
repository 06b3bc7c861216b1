"""Exactly once across crashes at every point of a run, with the checkpoint kept or lost.

Each case runs the real job (Spark, broker, catalog) to a crash at one point, optionally after
deleting its checkpoint, then restarts it and checks what an operator would: the lake equals the
source, nothing is duplicated, no message before the catalog's offsets was read again, and the
stored offsets reach the topic ends. Crashes are injected failpoints (:mod:`ingest.failpoints`):
they leave the checkpoint and the catalog as a ``kill -9`` at that point would, deterministically,
while one Spark session serves the whole matrix. The eight cases of a (table kind, starting
offsets) pair run side by side as concurrent streaming queries, each with its own topic, job,
table and checkpoint. ``test_ingest_soak.py`` kills real processes. Spark's own Kafka source
(``source.reader: spark``) runs two of the (table kind, starting offsets) pairs: its ends come
from Spark's offset log, its restart from the catalog alone.
"""

from __future__ import annotations

import itertools
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.failpoints import FailAt, Failpoint
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, IngestRun, run_ingest
from ingest.kafka.spark_source import SourceReader
from ingest.startpoint import StartOrigin
from tests.fixtures.feeds import Feed, stored_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]
CRASHES = {
    "before-first-batch": FailAt(Failpoint.BEFORE_QUERY),
    "inside-first-batch": FailAt(Failpoint.BATCH_WRITTEN, 0),
    "after-catalog-commit": FailAt(Failpoint.BATCH_COMMITTED, 0),
    "mid-stream": FailAt(Failpoint.BATCH_WRITTEN, 1),
}


def job_config(
    stream: Feed,
    table: str,
    kafka,
    home: Path,
    starting: str,
    *,
    reader: SourceReader = SourceReader.PYTHON,
) -> IngestJobConfig:
    common = {
        "source_reader": reader,
        "job": f"crash-{table}",
        "bootstrap_servers": kafka.bootstrap_servers,
        "checkpoint": home / "checkpoint",
        "dead_letter_table": "crash.dead_letters",
        "topics": (stream.topic,),
        "starting_offsets": starting,
        "max_offsets_per_trigger": 40,
        "hash_buckets": 2,
    }
    if stream.kind == "cdc":
        tables = DecoderConfig(topic_tables={stream.topic: table})
        return IngestJobConfig(**common, decoder=tables)
    return IngestJobConfig(
        **common, source_format=SourceFormat.JSON, json_tables={stream.topic: table}
    )


@dataclass(frozen=True)
class Case:
    kind: str
    starting: str
    reader: SourceReader
    checkpoint: str
    crash: str

    @property
    def name(self) -> str:
        return f"{self.checkpoint}_{self.crash}".replace("-", "_")


@pytest.mark.parametrize(
    ("kind", "starting", "reader"),
    [
        *itertools.product(["cdc", "append"], ["earliest", "latest"], [SourceReader.PYTHON]),
        ("cdc", "earliest", SourceReader.SPARK),
        ("append", "latest", SourceReader.SPARK),
    ],
)
@pytest.mark.slow
def test_a_crash_at_any_point_then_a_restart_commits_every_message_once(
    catalog: Catalog,
    kafka,
    spark,
    tmp_path: Path,
    *,
    kind: str,
    starting: str,
    reader: SourceReader,
):
    cases = [
        Case(kind, starting, reader, *pair)
        for pair in itertools.product(["kept", "deleted"], CRASHES)
    ]
    with ThreadPoolExecutor(4) as pool:
        runs = [
            pool.submit(crash_and_restart, case, catalog, kafka, spark, tmp_path) for case in cases
        ]
        failed = {case.name: run.exception() for case, run in zip(cases, runs, strict=True)}
    failed = {name: error for name, error in failed.items() if error is not None}
    for error in failed.values():
        raise AssertionError(f"{len(failed)} of {len(cases)} failed: {sorted(failed)}") from error


def crash_and_restart(case: Case, catalog: Catalog, kafka, spark, tmp_path: Path) -> None:
    stream = Feed(case.kind, kafka.topic(partitions=2))
    table = f"crash.{case.kind}_{case.name}"
    home = tmp_path / case.name
    config = job_config(stream, table, kafka, home, case.starting, reader=case.reader)
    if case.starting == "latest":  # the configured start is resolved on an empty topic, and kept
        assert run_ingest(config, spark, catalog).batches_committed == 0
    stream.produce(kafka, 60)
    run_ingest(config, spark, catalog)
    stream.assert_lake_holds_it(catalog, table)

    stream.produce(kafka, 100)  # several batches at 40 offsets each
    if case.checkpoint == "deleted":
        shutil.rmtree(home / "checkpoint")
    with pytest.raises(Exception, match="injected fault"):
        run_ingest(replace(config, fail_at=CRASHES[case.crash]), spark, catalog)

    stream.produce(kafka, 50)
    before = stored_offsets(catalog, config.job, stream.topic)
    final: IngestRun = run_ingest(config, spark, catalog)
    stream.assert_lake_holds_it(catalog, table)
    assert stored_offsets(catalog, config.job, stream.topic) == stream.ends
    unread = sum(end - before.get(part, 0) for part, end in stream.ends.items())
    assert final.records_read == unread, "a message before the catalog's offsets was read again"
    if case.checkpoint == "deleted" and case.crash == "before-first-batch":
        assert final.start is StartOrigin.CATALOG
