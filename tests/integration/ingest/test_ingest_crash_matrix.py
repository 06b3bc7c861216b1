"""Exactly once across crashes at every point of a run, with the checkpoint kept or lost.

Each case runs the real job (Spark, broker, catalog) to a crash at one point, optionally after
deleting its checkpoint, then restarts it and checks what an operator would: the lake equals the
source, nothing is duplicated, no message before the catalog's offsets was read again, and the
stored offsets reach the topic ends. Crashes are injected failpoints (:mod:`ingest.failpoints`):
they leave the checkpoint and the catalog as a ``kill -9`` at that point would, deterministically,
while one Spark session serves the whole matrix. The eight cases of a (table kind, starting
offsets) pair run side by side as concurrent streaming queries, each with its own topic, job,
table and checkpoint. ``test_ingest_soak.py`` kills real processes.
"""

from __future__ import annotations

import itertools
import random
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson
import pytest

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.failpoints import FailAt, Failpoint
from ingest.job import IngestJobConfig, IngestRun, run_ingest
from ingest.sink.plan import SourceFormat
from ingest.startpoint import StartOrigin
from tests.unit.ingest.debezium_events import customer, customer_change

pytestmark = [pytest.mark.integration, pytest.mark.spark]
CRASHES = {
    "before-first-batch": FailAt(Failpoint.BEFORE_QUERY),
    "inside-first-batch": FailAt(Failpoint.BATCH_WRITTEN, 0),
    "after-catalog-commit": FailAt(Failpoint.BATCH_COMMITTED, 0),
    "mid-stream": FailAt(Failpoint.BATCH_WRITTEN, 1),
}


@dataclass
class Stream:
    """A topic and a model of what the lake must hold after reading all of it."""

    kind: str
    topic: str
    table: str
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    lsn: int = 1_000
    next_id: int = 0
    rows: dict[int, dict] = field(default_factory=dict)
    events: Counter[int] = field(default_factory=Counter)
    ends: dict[str, int] = field(default_factory=dict)

    def produce(self, kafka, n: int) -> None:
        records = [self._cdc() if self.kind == "cdc" else self._event() for _ in range(n)]
        for sent in kafka.produce(self.topic, records):
            part = str(sent.partition)
            self.ends[part] = max(self.ends.get(part, 0), sent.offset + 1)

    def _event(self) -> tuple[bytes, bytes]:
        self.next_id += 1
        self.events[self.next_id] += 1
        return str(self.next_id).encode(), orjson.dumps({"id": self.next_id, "n": self.lsn})

    def _cdc(self) -> tuple[bytes, bytes]:
        self.lsn += 8
        id_ = self.rng.randrange(25)
        if id_ in self.rows and self.rng.random() < 0.25:
            del self.rows[id_]
            before = {"id": id_, "first_name": "", "last_name": "", "email": None}
            record = customer_change("d", id_, lsn=self.lsn, before=before)
        else:
            op = "u" if id_ in self.rows else "c"
            self.rows[id_] = customer(id_, f"{self.lsn}@example.com")
            record = customer_change(op, id_, lsn=self.lsn, after=self.rows[id_])
        return record.key, record.value


def job_config(stream: Stream, kafka, home: Path, starting: str) -> IngestJobConfig:
    common = {
        "job": f"crash-{stream.table}",
        "bootstrap_servers": kafka.bootstrap_servers,
        "checkpoint": home / "checkpoint",
        "dead_letter_table": "crash.dead_letters",
        "topics": (stream.topic,),
        "starting_offsets": starting,
        "max_offsets_per_trigger": 40,
        "hash_buckets": 2,
    }
    if stream.kind == "cdc":
        tables = DecoderConfig(topic_tables={stream.topic: stream.table})
        return IngestJobConfig(**common, decoder=tables)
    return IngestJobConfig(
        **common, source_format=SourceFormat.JSON, json_tables={stream.topic: stream.table}
    )


def assert_lake_equals_source(catalog: Catalog, stream: Stream) -> None:
    rows = catalog.load_table(stream.table).scan().to_arrow().to_pylist()
    if stream.kind == "cdc":
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), "a key appears twice"
        found = {r["id"]: {k: r[k] for k in ("id", "email")} for r in rows}
        assert found == {i: {"id": i, "email": r["email"]} for i, r in stream.rows.items()}
    else:
        assert Counter(r["id"] for r in rows) == stream.events  # a re-read is a duplicate


def stored_offsets(catalog: Catalog, job: str, topic: str) -> dict[str, int]:
    progress = catalog.writer_progress(job)
    return dict(progress.source_offsets.get(topic, {})) if progress else {}


@dataclass(frozen=True)
class Case:
    kind: str
    starting: str
    checkpoint: str
    crash: str

    @property
    def name(self) -> str:
        return f"{self.checkpoint}_{self.crash}".replace("-", "_")


@pytest.mark.parametrize("kind", ["cdc", "append"])
@pytest.mark.parametrize("starting", ["earliest", "latest"])
def test_a_crash_at_any_point_then_a_restart_commits_every_message_once(
    catalog: Catalog, kafka, spark, tmp_path: Path, *, kind: str, starting: str
):
    cases = [
        Case(kind, starting, *pair) for pair in itertools.product(["kept", "deleted"], CRASHES)
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
    stream = Stream(case.kind, kafka.topic(partitions=2), f"crash.{case.kind}_{case.name}")
    home = tmp_path / case.name
    config = job_config(stream, kafka, home, case.starting)
    if case.starting == "latest":  # the configured start is resolved on an empty topic, and kept
        assert run_ingest(config, spark, catalog).batches_committed == 0
    stream.produce(kafka, 60)
    run_ingest(config, spark, catalog)
    assert_lake_equals_source(catalog, stream)

    stream.produce(kafka, 100)  # several batches at 40 offsets each
    if case.checkpoint == "deleted":
        shutil.rmtree(home / "checkpoint")
    with pytest.raises(Exception, match="injected fault"):
        run_ingest(replace(config, fail_at=CRASHES[case.crash]), spark, catalog)

    stream.produce(kafka, 50)
    before = stored_offsets(catalog, config.job, stream.topic)
    final: IngestRun = run_ingest(config, spark, catalog)
    assert_lake_equals_source(catalog, stream)
    assert stored_offsets(catalog, config.job, stream.topic) == stream.ends
    unread = sum(end - before.get(part, 0) for part, end in stream.ends.items())
    assert final.records_read == unread, "a message before the catalog's offsets was read again"
    if case.checkpoint == "deleted" and case.crash == "before-first-batch":
        assert final.start is StartOrigin.CATALOG
