"""A catalog outage at each phase of a streaming batch: planning, the executors' writes, the
commit, and the commit's COMMIT. Each time the job waits, resumes on its own, and the lake ends
equal to the source with every batch landed once.

The job runs in this process (one Spark session for every case). The catalog it is given is the
real one with a trip wire: at the chosen phase of the first batch after a commit it stops the
server (``pg_ctl stop -m immediate``) and starts it again a few seconds later. For the COMMIT
case the catalog talks through the fault proxy, which delivers COMMIT and cuts the connection
before the answer; the server is stopped at that moment, so the committer cannot look its key
up and the sink must resolve the unknown outcome itself once the database is back.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import structlog

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
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, IngestRun, run_ingest
from ingest.sink.plan import SourceFormat
from tests.fixtures.faultproxy import CutRule, FaultProxy
from tests.fixtures.outage import CrashablePostgres, Outage
from tests.integration.ingest.feeds import Feed, stored_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DEAD_LETTERS = "outage.dead_letters"
DOWN_S = 4.0


class Tripwire:
    """Stops the server once, at ``phase``, in the first batch after a commit landed."""

    def __init__(self, server: CrashablePostgres, phase: str) -> None:
        self.server = server
        self.phase = phase
        self.armed = False
        self.outage: Outage | None = None
        self.cut: CutRule | None = None
        self._lock = threading.Lock()

    def hit(self, phase: str) -> None:
        with self._lock:
            if phase == self.phase and self.armed and self.outage is None:
                self.outage = self.server.outage(DOWN_S)

    def over(self) -> bool:
        return self.outage is not None and self.outage.ended is not None


class TrippingCatalog(Catalog):
    """The real catalog; it calls the trip wire where the sink's phases meet the catalog."""

    tripwire: Tripwire
    proxy: FaultProxy | None = None

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
        wire = self.tripwire
        if not wire.armed:
            wire.armed = True
            if wire.phase == "COMMIT" and self.proxy is not None:
                marker = b"INSERT INTO commit_key"
                wire.cut = self.proxy.cut_commit_after(marker, deliver_commit=True)
                threading.Thread(target=crash_at_the_cut, args=(wire,), daemon=True).start()
        return result


def crash_at_the_cut(wire: Tripwire) -> None:
    """Stop the server right after the proxy delivered COMMIT, before the client learns of
    the cut (the proxy holds the dead connection open for 0.2 s)."""
    while wire.cut is not None and not wire.cut.fired:
        time.sleep(0.005)
    time.sleep(0.05)  # the server commits (synchronous_commit is on for these databases)
    wire.hit("COMMIT")


def job_config(feed: Feed, table: str, bootstrap: str, home: Path) -> IngestJobConfig:
    common = {
        "job": f"phase-{feed.topic}",
        "bootstrap_servers": bootstrap,
        "checkpoint": home / "checkpoint",
        "dead_letter_table": DEAD_LETTERS,
        "topics": (feed.topic,),
        "max_offsets_per_trigger": 40,
        "hash_buckets": 2,
        "trigger_seconds": 0.5,
    }
    if feed.kind == "cdc":
        return IngestJobConfig(**common, decoder=DecoderConfig(topic_tables={feed.topic: table}))
    return IngestJobConfig(
        **common, source_format=SourceFormat.JSON, json_tables={feed.topic: table}
    )


@pytest.fixture
def proxy(outage_pg: CrashablePostgres) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(outage_pg.port)
    yield fault_proxy
    fault_proxy.close()


@pytest.mark.parametrize(
    ("phase", "kind"),
    [("planning", "cdc"), ("writes", "append"), ("commit", "cdc"), ("COMMIT", "append")],
)
def test_an_outage_in_each_phase_of_a_batch_is_waited_out_exactly_once(
    outage_pg: CrashablePostgres, proxy: FaultProxy, kafka, spark, tmp_path: Path, *, phase, kind
):
    dsn = outage_pg.database()
    feed = Feed(kind, kafka.topic(partitions=2))
    table = f"outage.{kind}_{phase.lower()}"
    config = job_config(feed, table, kafka.bootstrap_servers, tmp_path)
    via = proxy.dsn(dsn.rsplit("/", 1)[1]) if phase == "COMMIT" else dsn
    catalog = TrippingCatalog.connect(
        via,
        warehouse=tmp_path / "warehouse",
        # the committer gives up fast, so that the outage reaches the sink's own guard
        retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, deadline=1),
        settings=StoreSettings(pool_size=2, connect_timeout=2),
    )
    wire = catalog.tripwire = Tripwire(outage_pg, phase)
    catalog.proxy = proxy
    guard = OutageGuard(f"catalog of {phase}", OutagePolicy(budget=90, max_delay=1))
    stop, outcome = threading.Event(), {}

    def job() -> None:
        try:
            outcome["run"] = run_ingest(config, spark, catalog, stop, guard)
        except BaseException as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=job)
    with structlog.testing.capture_logs() as lines:
        runner.start()
        try:
            deadline = time.monotonic() + 180
            while not wire.over() and "error" not in outcome:  # keep producing till it is over
                assert time.monotonic() < deadline, "the outage never happened"
                feed.produce(kafka, 10)
                time.sleep(0.3)
            assert wire.outage is not None
            wire.outage.wait()
            with Catalog.connect(dsn) as check:
                while stored_offsets(check, config.job, feed.topic) != feed.ends:
                    assert "error" not in outcome, outcome["error"]
                    assert time.monotonic() < deadline + 120, "the job did not catch up"
                    time.sleep(0.2)
        finally:
            stop.set()
            runner.join(120)
            catalog.close()
    assert "error" not in outcome, outcome.get("error")
    assert isinstance(outcome["run"], IngestRun)

    with Catalog.connect(dsn) as check:
        feed.assert_lake_holds_it(check, table)
        history = check.load_table(table).history(limit=10_000)
        assert max(Counter((v.writer_id, v.batch_id) for v in history).values()) == 1
    events = Counter(line["event"] for line in lines)
    assert events["catalog_unavailable"] >= 1 and events["catalog_available"] == 1
    if phase == "COMMIT":
        assert wire.cut is not None and wire.cut.fired
        assert events["commit_outcome_unknown"] == 1 and events["commit_resolved"] == 1
