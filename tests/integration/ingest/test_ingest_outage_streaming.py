"""A streaming ingest job (processing-time trigger, a producer running) across catalog outages:
it waits, resumes on its own once the database is back, and the lake ends equal to the source
with every batch landed once.

The jobs run in this process (one Spark session for all); the process-level story - settings,
the one ``ingest_failed`` line, the exit code - is ``test_ingest_outage.py``'s.

The phase test hands the job the real catalog with a trip wire: at the next phase in its list,
in a batch after a commit landed, it stops the server (``pg_ctl stop -m immediate``) and starts
it again a few seconds later - during planning, during the executors' writes, during the commit,
and during the commit's COMMIT. For the last, the catalog talks through the fault proxy, which
delivers the commit and cuts the connection before the answer; the server is stopped as soon as
the commit landed,
so the committer cannot look the key up itself and the sink must resolve the unknown outcome by
the batch's key once the database is back.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from catalog import (
    Catalog,
    CommitRequest,
    CommitResult,
    OutageGuard,
    OutagePolicy,
    RetryPolicy,
    StoreSettings,
    Table,
)
from catalog.meta import TableMeta
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, run_ingest
from tests.fixtures.faultproxy import CutRule, FaultProxy
from tests.fixtures.feeds import Feed, stored_offsets
from tests.fixtures.logcapture import capture_events
from tests.fixtures.outage import CrashablePostgres, Outage

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DEAD_LETTERS = "outage.dead_letters"
PHASES = ["planning", "writes", "commit", "COMMIT"]
DOWN_S = 3.0
CUT_HOLD_S = 5.0
#: the committer gives up fast, so that an outage reaches the sink's own guard
IMPATIENT = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, deadline=1)


class Tripwire:
    """Stops the server at each phase in turn, in a batch after a commit landed."""

    def __init__(
        self,
        server: CrashablePostgres,
        proxy: FaultProxy,
        guard: OutageGuard,
        phases: list[str],
        dsn: str,
    ) -> None:
        self.server = server
        self.dsn = dsn
        self.proxy = proxy
        self.guard = guard
        self.pending = list(phases)
        self.outage: Outage | None = None
        self.outages: list[Outage] = []
        self.cut: CutRule | None = None
        self.armed = False
        self._lock = threading.Lock()

    def hit(self, phase: str) -> None:
        with self._lock:
            if self.armed and self.pending[:1] == [phase] and self.outage is None:
                # back only once the job met it (the executors' writes may outlast DOWN_S)
                self.outage = self.server.outage(DOWN_S, noticed=self._guard_waiting)
                self.outages.append(self.outage)

    def landed(self) -> None:
        """A commit landed: the phase in progress is over; arm the next one."""
        with self._lock:
            if self.outage is not None:
                self.outage, _ = None, self.pending.pop(0)
            self.armed = True
            if self.pending[:1] == ["COMMIT"] and self.cut is None:
                self.cut = self.proxy.cut_at_commit(deliver_commit=True, hold_s=CUT_HOLD_S)
                keys = self._commit_keys()
                threading.Thread(target=self._crash_at_the_cut, args=(keys,), daemon=True).start()

    def _crash_at_the_cut(self, keys_before: int) -> None:
        """Stop the server once the commit the proxy delivered has landed, before the client
        learns of the cut (the proxy holds the dead connection for CUT_HOLD_S)."""
        assert self.cut is not None
        while not self.cut.fired:
            time.sleep(0.005)
        deadline = time.monotonic() + CUT_HOLD_S / 2
        while self._commit_keys() == keys_before and time.monotonic() < deadline:
            time.sleep(0.01)  # synchronous_commit is on for these databases: a flush, under load
        self.hit("COMMIT")

    def _commit_keys(self) -> int:
        """Commits landed so far, asked directly of the server (not through the proxy)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM lakestream.commit_key").fetchone()
        return int(row[0]) if row else 0

    def _guard_waiting(self) -> bool:
        return self.guard.stats().outage_s is not None

    def over(self) -> bool:
        """Every phase had its outage and the last one ended."""
        return len(self.outages) == len(PHASES) and self.outages[-1].ended is not None


class TrippingCatalog(Catalog):
    """The real catalog; it calls the trip wire where the sink's phases meet the catalog."""

    tripwire: Tripwire

    def load_table(self, name: str) -> Table:
        self.tripwire.hit("planning")  # the first load of a batch plans it
        table = super().load_table(name)
        if name == DEAD_LETTERS:  # the last load of planning: the executors write next
            self.tripwire.hit("writes")
        return table

    def commit(
        self, request: CommitRequest, *, known: Mapping[str, TableMeta] | None = None
    ) -> CommitResult:
        self.tripwire.hit("commit")
        result = super().commit(request, known=known)
        self.tripwire.landed()
        return result


def job_config(
    feed: Feed, table: str, bootstrap: str, home: Path, batch: int = 40
) -> IngestJobConfig:
    return IngestJobConfig(
        job=f"outage-{feed.topic}",
        bootstrap_servers=bootstrap,
        checkpoint=home / "checkpoint",
        dead_letter_table=DEAD_LETTERS,
        topics=(feed.topic,),
        max_offsets_per_trigger=batch,
        trigger_seconds=0.5,
        source_format=SourceFormat.JSON,
        json_tables={feed.topic: table},
    )


@contextmanager
def streaming(
    config: IngestJobConfig, spark: Any, catalog: Catalog, guard: OutageGuard
) -> Iterator[dict[str, Any]]:
    """The job running in a thread until the block ends; what it returned or raised."""
    stop, outcome = threading.Event(), {}

    def job() -> None:
        try:
            outcome["run"] = run_ingest(config, spark, catalog, stop, guard)
        except BaseException as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=job)
    runner.start()
    try:
        yield outcome
    finally:
        stop.set()
        runner.join(120)
    assert "error" not in outcome, outcome.get("error")
    assert "run" in outcome


def wait_until_caught_up(dsn: str, feed: Feed, job: str, outcome: dict[str, Any]) -> None:
    deadline = time.monotonic() + 180
    with Catalog.connect(dsn) as check:
        while stored_offsets(check, job, feed.topic) != feed.ends:
            assert "error" not in outcome, outcome["error"]
            assert time.monotonic() < deadline, "the job did not catch up"
            time.sleep(0.2)


def assert_exactly_once(dsn: str, feed: Feed, table: str) -> None:
    with Catalog.connect(dsn) as check:
        feed.assert_lake_holds_it(check, table)
        history = check.load_table(table).history(limit=10_000)
        batches = Counter((v.writer_id, v.batch_id) for v in history)
        assert max(batches.values()) == 1, "a batch was committed twice"


@pytest.fixture
def proxy(outage_pg: CrashablePostgres) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(outage_pg.port)
    yield fault_proxy
    fault_proxy.close()


@pytest.mark.slow
def test_a_streaming_job_rides_out_a_30s_outage_and_resumes_on_its_own(
    outage_pg: CrashablePostgres, kafka, spark, tmp_path: Path
):
    dsn = outage_pg.database()
    feed = Feed("append", kafka.topic(partitions=2))
    # batches large enough to catch up on the outage's backlog in a few
    config = job_config(feed, "outage.events", kafka.bootstrap_servers, tmp_path, batch=1000)
    catalog = Catalog.connect(dsn, warehouse=tmp_path / "warehouse", retry=IMPATIENT)
    guard = OutageGuard("the catalog", OutagePolicy(budget=120))
    stop_producing = threading.Event()
    producer = threading.Thread(target=feed.produce_until, args=(kafka, stop_producing, 3))
    with capture_events() as lines, streaming(config, spark, catalog, guard) as out:
        producer.start()
        try:
            with Catalog.connect(dsn) as check:
                while not (
                    check.table_exists("outage.events")
                    and stored_offsets(check, config.job, feed.topic)
                ):
                    assert "error" not in out, out["error"]
                    time.sleep(0.2)
            outage_pg.outage(30).wait()
            committed = len([e for e in lines if e["event"] == "batch_committed"])
            deadline = time.monotonic() + 120
            while len([e for e in lines if e["event"] == "batch_committed"]) == committed:
                assert "error" not in out, out["error"]  # it waited, and commits again
                assert time.monotonic() < deadline, "no commit after the outage"
                time.sleep(0.2)
        finally:
            stop_producing.set()
            producer.join(60)
        wait_until_caught_up(dsn, feed, config.job, out)
    catalog.close()
    assert_exactly_once(dsn, feed, "outage.events")
    [back] = [e for e in lines if e["event"] == "catalog_available"]
    assert back["outage_s"] >= 25
    assert guard.stats().outages == 1


@pytest.mark.slow
def test_an_outage_in_each_phase_of_a_batch_is_waited_out_exactly_once(
    outage_pg: CrashablePostgres, proxy: FaultProxy, kafka, spark, tmp_path: Path
):
    dsn = outage_pg.database()
    feed = Feed("append", kafka.topic(partitions=2))
    config = job_config(feed, "outage.phases", kafka.bootstrap_servers, tmp_path)
    catalog = TrippingCatalog.connect(
        proxy.dsn(dsn.rsplit("/", 1)[1]),
        warehouse=tmp_path / "warehouse",
        retry=IMPATIENT,
        settings=StoreSettings(pool_size=2, connect_timeout=2),
    )
    guard = OutageGuard("the catalog", OutagePolicy(budget=90, max_delay=1))
    wire = catalog.tripwire = Tripwire(outage_pg, proxy, guard, PHASES, dsn)
    with capture_events() as lines, streaming(config, spark, catalog, guard) as out:
        deadline = time.monotonic() + 240
        while not wire.over():  # keep producing through every phase's outage
            assert "error" not in out, out["error"]
            assert time.monotonic() < deadline, f"phases never reached: {wire.pending}"
            feed.produce(kafka, 8)
            time.sleep(0.3)
        wire.outages[-1].wait()
        wait_until_caught_up(dsn, feed, config.job, out)
    catalog.close()

    assert_exactly_once(dsn, feed, "outage.phases")
    events = Counter(line["event"] for line in lines)
    assert events["catalog_available"] == len(PHASES)
    assert events["catalog_unavailable"] >= len(PHASES)
    assert wire.cut is not None and wire.cut.fired
    assert events["commit_outcome_unknown"] == 1 and events["commit_resolved"] == 1
