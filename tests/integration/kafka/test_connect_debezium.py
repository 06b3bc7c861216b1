"""Debezium's PostgreSQL connector inside a real Kafka Connect worker, as users run it.

The other real-Debezium tests run the deployment's connector on the session's worker
(:mod:`tests.fixtures.debezium`). Here :class:`~ingest.kafka.connect.LocalConnect` runs
``ConnectDistributed`` (jars from Maven Central) against an Apache Kafka broker: connectors are
registered over REST, Connect creates the topics, its producer writes them, and its offsets, configs
and statuses live in Kafka. What a test reads is what a deployment's topics would hold:

* snapshot, inserts, updates, deletes and tombstones as Debezium envelopes, from the
  JsonConverter with and without schemas;
* the ``<prefix>.transaction`` topic with BEGIN/END markers when ``provide.transaction.metadata``
  is on;
* a connector restarted over REST and a worker killed mid-stream: every change made meanwhile
  arrives, and anything sent twice is a re-send of the same change, in an order that leaves each
  key at its last state;
* ``exactly.once.source.support=enabled``: the records are written in Kafka transactions, so
  their offsets have gaps where the commit markers are;
* and end to end into the lake with ``run_ingest``: the lake equals the source tables, and with
  transaction metadata on a 3-partition transaction topic every lake version is consistent.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from ingest.kafka.connect import DEBEZIUM_VERSION, LocalConnect, postgres_connector_config
from ingest.transactions import TransactionMode
from jobs.localpg import LocalPostgres
from tests.fixtures.debezium import create_source_database, drop_source_database
from tests.integration.transactions.support import START_BALANCE, broken, cuts

pytestmark = pytest.mark.integration

TIMEOUT = 90.0
#: The envelope's own processing times: a re-sent change carries the time of its second send.
PROCESSING_TIMES = ("ts_ms", "ts_us", "ts_ns")


# -- services ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[ApacheKafka]:
    with ApacheKafka.start() as kafka:
        yield kafka


@pytest.fixture(scope="module")
def connect(broker: ApacheKafka) -> Iterator[LocalConnect]:
    started = time.monotonic()
    with LocalConnect.start(broker.bootstrap_servers) as worker:
        print(f"\nMEASURE connect worker start: {time.monotonic() - started:.2f} s")
        yield worker


@pytest.fixture(scope="module")
def eos_connect(broker: ApacheKafka) -> Iterator[LocalConnect]:
    """A second worker (a group of its own) with exactly-once source support."""
    started = time.monotonic()
    with LocalConnect.start(broker.bootstrap_servers, exactly_once=True) as worker:
        print(f"\nMEASURE connect worker (exactly once) start: {time.monotonic() - started:.2f} s")
        yield worker


@dataclass
class Source:
    """A database of its own on the session's PostgreSQL, and an autocommit connection."""

    port: int
    database: str
    conn: psycopg.Connection[Any]

    def config(self, prefix: str, tables: str, **overrides: str) -> dict[str, str]:
        schemas = overrides.pop("schemas", "true") == "true"
        return postgres_connector_config(
            port=self.port,
            database=self.database,
            tables=tables,
            prefix=prefix,
            schemas=schemas,
            overrides=overrides,
        )


@pytest.fixture
def source(pg_server: LocalPostgres) -> Iterator[Source]:
    name = create_source_database(pg_server)
    conn = psycopg.connect(pg_server.dsn(name), autocommit=True)
    try:
        yield Source(pg_server.port, name, conn)
    finally:
        conn.close()
        drop_source_database(pg_server, name)


@pytest.fixture
def registered() -> Iterator[list[tuple[LocalConnect, str]]]:
    """Connectors a test registered, deleted after it (before its database is dropped)."""
    names: list[tuple[LocalConnect, str]] = []
    yield names
    for worker, name in names:
        if worker.process.poll() is None and name in worker.connectors():
            worker.delete(name)


def register(
    worker: LocalConnect,
    registered: list[tuple[LocalConnect, str]],
    source: Source,
    tables: str,
    **overrides: str,
) -> str:
    prefix = f"cx{uuid.uuid4().hex[:8]}"
    worker.register(prefix, source.config(prefix, tables, **overrides))
    registered.append((worker, prefix))
    return prefix


# -- reading topics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    raw_key: bytes | None
    raw_value: bytes | None
    received: float

    @property
    def key(self) -> Any:
        return None if self.raw_key is None else json.loads(self.raw_key)

    @property
    def value(self) -> Any:
        return None if self.raw_value is None else json.loads(self.raw_value)


class Tail:
    """Every record of a topic from its start, as a consumer with ``isolation`` reads them.

    The topic may not exist yet (Connect creates it with the first record)."""

    def __init__(self, bootstrap: str, topic: str, *, isolation: str = "read_committed") -> None:
        self.topic = topic
        self.records: list[Record] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.partitions: list[int] = []

    def _assign(self) -> bool:
        if self.partitions:
            return True
        metadata = self.consumer.list_topics(self.topic, timeout=5)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            return False
        self.partitions = sorted(found.partitions)
        self.consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self.partitions]
        )
        return True

    def until(self, count: int, timeout: float = TIMEOUT) -> list[Record]:
        """Read until at least ``count`` records arrived in all; returns all so far."""
        deadline = time.monotonic() + timeout
        while len(self.records) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}: {len(self.records)} of {count} records in {timeout} s"
                )
            self._poll()
        return list(self.records)

    def _poll(self) -> None:
        if not self._assign():
            time.sleep(0.2)
            return
        for message in self.consumer.consume(100, timeout=0.2):
            error = message.error()
            assert error is None, error
            self.records.append(
                Record(
                    message.partition() or 0,
                    message.offset() or 0,
                    message.key(),
                    message.value(),
                    time.monotonic(),
                )
            )

    def settle(self, quiet: float = 2.0) -> list[Record]:
        """Read until nothing more arrives for ``quiet`` seconds (no extra records expected)."""
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            before = len(self.records)
            self._poll()
            if len(self.records) > before:
                last = time.monotonic()
        return list(self.records)

    def high_watermarks(self) -> dict[int, int]:
        return {
            p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1]
            for p in self.partitions
        }

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def payload(document: Any, schemas: bool) -> Any:
    """The envelope (or key) inside the JsonConverter's ``{"schema", "payload"}`` wrapper."""
    if document is None or not schemas:
        return document
    assert set(document) == {"schema", "payload"}, document
    return document["payload"]


def without_processing_times(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope.items() if k not in PROCESSING_TIMES}


# -- (a) envelopes -------------------------------------------------------------------------------


@pytest.mark.parametrize("schemas", [False, True], ids=["schemaless", "with_schemas"])
def test_snapshot_and_changes_arrive_as_debezium_envelopes(
    connect: LocalConnect,
    broker: ApacheKafka,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
    schemas: bool,
) -> None:
    conn = source.conn
    conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int)")
    conn.execute("INSERT INTO items VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)")
    prefix = register(connect, registered, source, "public.items", schemas=str(schemas).lower())
    topic = f"{prefix}.public.items"
    with Tail(broker.bootstrap_servers, topic) as tail:
        snapshot = tail.until(3)
        changed = time.monotonic()
        conn.execute("INSERT INTO items VALUES (4, 'd', 40)")
        latency = tail.until(4)[-1].received - changed
        print(f"\nMEASURE change -> topic (insert, {'schemas' if schemas else 'schemaless'}): "
              f"{latency * 1000:.0f} ms")  # fmt: skip
        conn.execute("UPDATE items SET name = 'a2', qty = 11 WHERE id = 1")
        conn.execute("DELETE FROM items WHERE id = 2")
        records = tail.until(7)
        assert len(tail.settle(1.0)) == 7

    assert len(snapshot) == 3
    envelopes = [payload(r.value, schemas) for r in records]
    keys = [payload(r.key, schemas) for r in records]
    assert [e and e["op"] for e in envelopes] == ["r", "r", "r", "c", "u", "d", None]
    assert keys == [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 1}, {"id": 2}, {"id": 2}]
    assert [e["after"] for e in envelopes[:4]] == [
        {"id": 1, "name": "a", "qty": 10},
        {"id": 2, "name": "b", "qty": 20},
        {"id": 3, "name": "c", "qty": 30},
        {"id": 4, "name": "d", "qty": 40},
    ]
    assert [e["source"]["snapshot"] for e in envelopes[:4]] == ["first", "true", "last", "false"]
    update, delete = envelopes[4], envelopes[5]
    # the default replica identity: no old row for an update, only the key for a delete
    assert update["before"] is None
    assert update["after"] == {"id": 1, "name": "a2", "qty": 11}
    assert delete["after"] is None and delete["before"]["id"] == 2
    assert records[6].raw_value is None  # the tombstone after the delete
    for envelope in envelopes[:6]:
        src = envelope["source"]
        assert (src["connector"], src["version"], src["name"]) == (
            "postgresql", DEBEZIUM_VERSION, prefix
        )  # fmt: skip
        assert (src["db"], src["schema"], src["table"]) == (source.database, "public", "items")
        assert isinstance(src["lsn"], int) and isinstance(src["txId"], int)
    lsns = [e["source"]["lsn"] for e in envelopes[3:6]]
    assert lsns == sorted(lsns)
    if schemas:
        value, key = records[3].value, records[3].key
        assert value["schema"]["name"] == f"{prefix}.public.items.Envelope"
        assert key["schema"]["name"] == f"{prefix}.public.items.Key"
        after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
        types = {f["field"]: (f["type"], f["optional"]) for f in after["fields"]}
        assert types == {"id": ("int32", False), "name": ("string", False), "qty": ("int32", True)}
    else:
        assert "schema" not in records[3].value and "payload" not in records[3].value


# -- (b) transaction metadata --------------------------------------------------------------------


def test_transaction_metadata_goes_to_the_transaction_topic(
    connect: LocalConnect,
    broker: ApacheKafka,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
) -> None:
    conn = source.conn
    conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint)")
    conn.execute("CREATE TABLE audit (id int PRIMARY KEY, amount bigint)")
    conn.execute("INSERT INTO accounts VALUES (1, 100), (2, 100)")
    prefix = register(
        connect, registered, source, "public.accounts,public.audit",
        schemas="false", **{"provide.transaction.metadata": "true"},
    )  # fmt: skip
    bootstrap = broker.bootstrap_servers
    with (
        Tail(bootstrap, f"{prefix}.public.accounts") as accounts,
        Tail(bootstrap, f"{prefix}.public.audit") as audit,
        Tail(bootstrap, f"{prefix}.transaction") as markers,
    ):
        accounts.until(2)  # the snapshot: no transaction metadata
        txids = []
        for n in (1, 2):
            with conn.transaction():
                txids.append(conn.execute("SELECT txid_current()").fetchone()[0])  # type: ignore[index]
                conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = 1")
                conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = 2")
                conn.execute("INSERT INTO audit VALUES (%s, 5)", (n,))
        found = markers.until(4)
        changes = [r.value for r in accounts.until(6)[2:]] + [r.value for r in audit.until(2)]

    bodies = [r.value for r in found]
    assert [b["status"] for b in bodies] == ["BEGIN", "END", "BEGIN", "END"]
    for (begin, end), txid in zip(zip(bodies[::2], bodies[1::2], strict=True), txids, strict=True):
        assert begin["id"].split(":")[0] == str(txid) and end["id"].split(":")[0] == str(txid)
        assert begin["event_count"] is None
        assert end["event_count"] == 3
        counts = {c["data_collection"]: c["event_count"] for c in end["data_collections"]}
        assert counts == {"public.accounts": 2, "public.audit": 1}
        mine = [c for c in changes if c["source"]["txId"] == txid]
        assert sorted(c["transaction"]["total_order"] for c in mine) == [1, 2, 3]
        # ids are <txId>:<LSN>, the LSN the record's own (the END's: the commit's)
        ids = [c["transaction"]["id"] for c in mine]
        assert all(i.split(":")[0] == str(txid) for i in ids)
        assert max(int(i.split(":")[1]) for i in ids) <= int(end["id"].split(":")[1])
    assert all(r.key == {"id": r.value["id"]} for r in found)


# -- (c) restarts ---------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Runs ``statements`` one transaction each, a few milliseconds apart."""

    def __init__(self, dsn: str, statements: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.statements = statements
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for query, params in self.statements:
                    conn.execute(query, params)
                    self.done += 1
                    time.sleep(0.01)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> None:
        self.join(TIMEOUT)
        assert not self.is_alive() and self.error is None, self.error


def changes_in(records: list[Record]) -> set[tuple[str, int]]:
    """(op, id) of every change event (not tombstones) among ``records``."""
    return {(r.value["op"], r.key["id"]) for r in records if r.value is not None}


def wait_changes(
    tail: Tail, expected: set[tuple[str, int]], worker: LocalConnect, timeout: float = TIMEOUT
) -> None:
    """Read until every (op, id) in ``expected`` arrived; fail naming the missing ones."""
    deadline = time.monotonic() + timeout
    while not expected <= changes_in(tail.records):
        if time.monotonic() > deadline:
            missing = sorted(expected - changes_in(tail.records), key=lambda c: (c[1], c[0]))
            raise AssertionError(
                f"{len(missing)} changes never arrived: {missing[:40]}; "
                f"{len(tail.records)} records read\n{worker.log_tail(4000)}"
            )
        tail._poll()


def test_restarts_mid_stream_lose_nothing_and_resend_only_exact_copies(
    broker: ApacheKafka,
    pg_server: LocalPostgres,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
) -> None:
    """A REST restart of the connector, then a SIGKILL of the whole worker while changes are
    being made, more changes while it is down, and a new worker of the same group: Connect
    finds the connector in its config topic and resumes from the offsets in its offsets
    topic."""
    conn = source.conn
    dsn = pg_server.dsn(source.database)
    conn.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)")
    conn.execute("INSERT INTO items VALUES (0, 0)")  # its snapshot event: streaming began
    group = f"cx-restart-{uuid.uuid4().hex[:8]}"
    worker = LocalConnect.start(broker.bootstrap_servers, group_id=group)
    try:
        prefix = register(worker, registered, source, "public.items", schemas="false")
        with Tail(broker.bootstrap_servers, f"{prefix}.public.items") as tail:
            wait_changes(tail, {("r", 0)}, worker)
            inserts = [("INSERT INTO items VALUES (%s, 0)", (i,)) for i in range(1, 101)]
            writer = Writer(dsn, inserts[:60])
            writer.start()
            while writer.done < 20:
                time.sleep(0.01)
            worker.restart(prefix)  # the connector and its task, over REST, mid-stream
            writer.finish()
            wait_changes(tail, {("c", i) for i in range(1, 61)}, worker)
            after_rest_restart = len(tail.records) - 1  # not the snapshot's record

            updates = [("UPDATE items SET v = v + 1 WHERE id = %s", (i,)) for i in range(1, 61)]
            writer = Writer(dsn, updates)
            writer.start()
            while writer.done < 25:
                time.sleep(0.01)
            worker.kill()  # a crash: no offset flush, no leaving the group
            killed_at = writer.done
            writer.finish()
            # while no worker runs
            for query, params in inserts[60:]:
                conn.execute(query, params)
            conn.execute("DELETE FROM items WHERE id BETWEEN 1 AND 10")
            worker.stop()
            started = time.monotonic()
            worker = LocalConnect.start(broker.bootstrap_servers, group_id=group)
            worker.wait_running(prefix)
            restarted = time.monotonic() - started
            print(f"\nMEASURE worker restart to connector RUNNING: {restarted:.1f} s")
            registered[-1] = (worker, prefix)
            expected = (
                {("c", i) for i in range(1, 101)}
                | {("u", i) for i in range(1, 61)}
                | {("d", i) for i in range(1, 11)}
            )
            wait_changes(tail, expected, worker)
            records = tail.settle(3.0)
            stored_offsets = worker.offsets(prefix)
    finally:
        worker.stop()

    # a graceful restart may re-send too: the task resumes from the last offsets Connect
    # committed (every offset.flush.interval.ms), not from the last record it sent
    assert after_rest_restart >= 60
    # every record by what change it is: (op, key, LSN); tombstones by the delete before them
    seen: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    tombstones = Counter[int]()
    for record in records:
        key = record.key["id"]
        if record.value is None:
            tombstones[key] += 1
            continue
        envelope = record.value
        change = (envelope["op"], key, envelope["source"]["lsn"])
        seen.setdefault(change, []).append(envelope)
    counts = Counter(op for op, _, _ in seen)
    assert counts == Counter({"r": 1, "c": 100, "u": 60, "d": 10}), counts
    assert set(tombstones) == set(range(1, 11))
    duplicates = {change: copies for change, copies in seen.items() if len(copies) > 1}
    for change, copies in duplicates.items():
        first = without_processing_times(copies[0])
        assert all(without_processing_times(c) == first for c in copies[1:]), change
    print(
        f"\nMEASURE restart: {len(records)} records for {len(seen) + len(tombstones)} distinct; "
        f"{after_rest_restart - 60} re-sent by the REST restart; {len(duplicates)} changes "
        f"re-sent in all (the worker was killed after {killed_at} updates)"
    )
    # replayed in topic order, last write per key wins: the ingest's view equals the table
    state: dict[int, int | None] = {}
    for record in records:
        envelope = record.value
        if envelope is None:
            continue
        after = envelope["after"]
        state[record.key["id"]] = None if after is None else after["v"]
    table = dict(conn.execute("SELECT id, v FROM items").fetchall())
    assert {k: v for k, v in state.items() if v is not None} == table
    # Connect's own offsets, read back from its offsets topic: the LSN it resumes from
    assert stored_offsets and "lsn" in stored_offsets[0]["offset"]


# -- (d) exactly-once source support -------------------------------------------------------------


def test_exactly_once_worker_writes_transactional_batches(
    eos_connect: LocalConnect,
    broker: ApacheKafka,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
) -> None:
    conn = source.conn
    conn.execute("CREATE TABLE items (id int PRIMARY KEY, v int)")
    conn.execute("INSERT INTO items SELECT g, 0 FROM generate_series(1, 5) g")
    prefix = register(
        eos_connect, registered, source, "public.items",
        schemas="false", **{"exactly.once.support": "required"},
    )  # fmt: skip
    topic = f"{prefix}.public.items"
    with (
        Tail(broker.bootstrap_servers, topic) as committed,
        Tail(broker.bootstrap_servers, topic, isolation="read_uncommitted") as uncommitted,
    ):
        committed.until(5)
        for i in range(6, 11):  # five transactions, apart enough to be polled one by one
            conn.execute("INSERT INTO items VALUES (%s, 0)", (i,))
            committed.until(i)
        records = committed.settle(1.0)
        raw = uncommitted.until(10)
        high = committed.high_watermarks()

    assert [r.value["after"]["id"] for r in records] == list(range(1, 11))
    offsets = [r.offset for r in records]
    print(f"\nMEASURE exactly-once offsets of 10 records: {offsets}, high watermark {high}")
    gaps = [b - a for a, b in itertools.pairwise(offsets) if b - a > 1]
    # each streamed change was its own poll and so its own Kafka transaction: a commit marker
    # (a control record, never delivered) after each, taking an offset
    assert len(gaps) >= 5, offsets
    assert high[0] > offsets[-1] + 1  # the last transaction's marker
    assert [r.offset for r in raw] == offsets  # the markers are invisible to both isolations


# -- end to end into the lake --------------------------------------------------------------------


def lake(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    rows = catalog.load_table(name).scan().to_arrow().to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_ls_")} for r in rows}


def table(conn: psycopg.Connection[Any], name: str) -> dict[int, dict[str, Any]]:
    cursor = conn.execute(f"SELECT * FROM {name}")
    columns = [c.name for c in cursor.description or ()]
    return {row[0]: dict(zip(columns, row, strict=True)) for row in cursor.fetchall()}


@pytest.mark.spark
@pytest.mark.slow
def test_connect_debezium_into_the_lake(
    *,
    eos_connect: LocalConnect,
    broker: ApacheKafka,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
    catalog: Catalog,
    spark: Any,
    tmp_path: Path,
) -> None:
    """Through the exactly-once worker (offsets with gaps) into the lake: snapshot and a random
    mix of inserts, updates and deletes, then the lake equals the source table."""
    conn = source.conn
    conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int)")
    conn.execute("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 20) g")
    prefix = register(eos_connect, registered, source, "public.items")
    topic = f"{prefix}.public.items"
    rng = random.Random(7)
    events = 20
    next_id = 21
    for _ in range(60):
        ids = [row[0] for row in conn.execute("SELECT id FROM items").fetchall()]
        kind = rng.choice(("insert", "update", "update", "delete")) if ids else "insert"
        if kind == "insert":
            conn.execute("INSERT INTO items VALUES (%s, %s, %s)", (next_id, f"new {next_id}", None))
            next_id += 1
            events += 1
        elif kind == "update":
            conn.execute(
                "UPDATE items SET qty = %s, name = name || '+' WHERE id = %s",
                (rng.randint(-5, 500), rng.choice(ids)),
            )
            events += 1
        else:
            conn.execute("DELETE FROM items WHERE id = %s", (rng.choice(ids),))
            events += 2  # and its tombstone
    with Tail(broker.bootstrap_servers, topic) as tail:
        records = tail.until(events)
        high = tail.high_watermarks()[0]
    # the worker wrote in Kafka transactions: the last offset is a commit marker, which a
    # reader never receives, so it must not wait for the high watermark's last record
    assert high > records[-1].offset + 1
    config = IngestJobConfig(
        job=f"connect-{prefix}",
        bootstrap_servers=broker.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: "shop.items"}),
        hash_buckets=2,
    )
    run_ingest(config, spark, catalog)
    assert lake(catalog, "shop.items") == table(conn, "items")


@pytest.mark.spark
@pytest.mark.slow
def test_connect_transactions_with_a_three_partition_transaction_topic_stay_consistent(
    *,
    connect: LocalConnect,
    broker: ApacheKafka,
    source: Source,
    registered: list[tuple[LocalConnect, str]],
    catalog: Catalog,
    spark: Any,
    tmp_path: Path,
) -> None:
    """Transfers (two account updates and an audit row per transaction) with transaction
    metadata; the data topics and the transaction topic made before the connector, the
    transaction topic with 3 partitions, so Connect's producer spreads the markers by key.
    Ingested in small batches with ``transactions: consistent``: every lake version keeps the
    bank's invariants."""
    accounts, transfers = 6, 30
    conn = source.conn
    conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint, moves bigint)")
    conn.execute("CREATE TABLE audit (id int PRIMARY KEY, amount bigint)")
    for i in range(1, accounts + 1):
        conn.execute("INSERT INTO accounts VALUES (%s, %s, 0)", (i, START_BALANCE))
    prefix = f"cx{uuid.uuid4().hex[:8]}"
    partitions = {"public.accounts": 3, "public.audit": 2, "transaction": 3}
    for name, count in partitions.items():
        create_topic(broker.bootstrap_servers, f"{prefix}.{name}", count)
    connect.register(
        prefix,
        source.config(
            prefix, "public.accounts,public.audit", **{"provide.transaction.metadata": "true"}
        ),
    )
    registered.append((connect, prefix))
    rng = random.Random(3)
    for n in range(1, transfers + 1):
        a, b = rng.sample(range(1, accounts + 1), 2)
        amount = rng.randint(1, 50)
        with conn.transaction():
            move = "UPDATE accounts SET balance = balance + %s, moves = moves + 1 WHERE id = %s"
            conn.execute(move, (-amount, a))
            conn.execute(move, (amount, b))
            conn.execute("INSERT INTO audit VALUES (%s, %s)", (n, amount))
    topics = tuple(f"{prefix}.{name}" for name in partitions)
    with Tail(broker.bootstrap_servers, topics[2]) as markers:
        found = markers.until(2 * transfers)
    assert {r.partition for r in found} == {0, 1, 2}
    with Tail(broker.bootstrap_servers, topics[0]) as data:
        data.until(accounts + 2 * transfers)
    with Tail(broker.bootstrap_servers, topics[1]) as data:
        data.until(transfers)

    config = IngestJobConfig(
        job=f"connect-{prefix}",
        bootstrap_servers=broker.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=topics,
        hash_buckets=2,
        max_offsets_per_trigger=13,
        transactions=TransactionMode.CONSISTENT,
    )
    run_ingest(config, spark, catalog)
    for name in ("accounts", "audit"):
        assert lake(catalog, f"public.{name}") == table(conn, name)
    complete = [s for _, s in cuts(catalog) if len(s["public.accounts"]) == accounts]
    assert len(complete) >= 5
    assert [broken(s, accounts) for s in complete if broken(s, accounts)] == []
