"""A bank of accounts whose transfers keep cross-table invariants, as Debezium with transaction
metadata would publish them, and the checks of every lake version.

Each transfer is one source transaction of three events: two account updates (``balance``
moves, ``moves`` counts the touches) and one ``audit`` insert. At any transaction-consistent cut
the sum of balances is constant and ``sum(moves) == 2 * audit rows``; a cut inside a transfer
breaks one of them.

The transaction topic has one partition unless :class:`Topics` says more; then each BEGIN and
END marker goes to a partition of its own choice (:meth:`Bank.marker_partition`), as Debezium's
markers, keyed by their ids, are spread by a producer's partitioner.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from catalog import Catalog, TableNotFoundError, VersionInfo
from ingest.kafka.apache_kafka import create_topic
from tests.fixtures.broker import produce
from tests.fixtures.debezium_events import field as connect_field
from tests.fixtures.debezium_events import key, payload, pg_source, value

ACCOUNTS, AUDIT = "public.accounts", "public.audit"
ACCOUNT_FIELDS = [
    connect_field("id", "int32", optional=False),
    connect_field("balance", "int64"),
    connect_field("moves", "int64"),
]
AUDIT_FIELDS = [connect_field("id", "int32", optional=False), connect_field("amount", "int64")]
KEY_FIELDS = [connect_field("id", "int32", optional=False)]
START_BALANCE = 1_000

Record = tuple[bytes | None, bytes | None]


@dataclass
class Topics:
    prefix: str
    accounts_partitions: int = 3
    audit_partitions: int = 2
    transaction_partitions: int = 1

    @property
    def accounts(self) -> str:
        return f"{self.prefix}.{ACCOUNTS}"

    @property
    def audit(self) -> str:
        return f"{self.prefix}.{AUDIT}"

    @property
    def transaction(self) -> str:
        return f"{self.prefix}.transaction"

    def all(self) -> tuple[str, ...]:
        return (self.accounts, self.audit, self.transaction)

    def create(self, bootstrap: str) -> None:
        create_topic(bootstrap, self.accounts, self.accounts_partitions)
        create_topic(bootstrap, self.audit, self.audit_partitions)
        create_topic(bootstrap, self.transaction, self.transaction_partitions)


def new_topics(transaction_partitions: int = 1) -> Topics:
    return Topics(f"bank{uuid.uuid4().hex[:8]}", transaction_partitions=transaction_partitions)


@dataclass
class Bank:
    """The source database and the messages it would produce, per topic-partition.

    ``marker_rng`` places the markers of a transaction topic of several partitions: each
    marker on a random partition, so that partitions get runs of uneven length (without it,
    both markers of transaction ``n`` go to partition ``n % partitions``)."""

    topics: Topics
    accounts: dict[int, dict[str, int]] = field(default_factory=dict)
    audit: dict[int, dict[str, int]] = field(default_factory=dict)
    lsn: int = 10_000
    txid: int = 500
    out: dict[tuple[str, int], list[Record]] = field(default_factory=dict)
    stalled: dict[tuple[str, int], list[Record]] = field(default_factory=dict)
    marker_rng: random.Random | None = None
    ends: list[tuple[str, int]] = field(default_factory=list)
    """(transaction id, partition of the transaction topic) of each END marker, in commit
    order."""
    produced: dict[tuple[str, int], int] = field(default_factory=dict)
    """Records sent to each topic-partition so far (its next offset)."""

    def open_accounts(self, n: int) -> None:
        """The initial snapshot: reads without transaction metadata."""
        for i in range(1, n + 1):
            self.accounts[i] = {"id": i, "balance": START_BALANCE, "moves": 0}
            self._event(ACCOUNTS, i, "r", self.accounts[i], None)

    def transfer(self, rng: random.Random, *, stall_audit: bool = False) -> str:
        """One transfer; returns its transaction id. ``stall_audit`` keeps its audit event back
        (a stalled partition) until :meth:`release_stalled`."""
        self.txid += 1
        a, b = rng.sample(sorted(self.accounts), 2)
        amount = rng.randint(1, 50)
        txn = (str(self.txid), self.lsn)
        self._marker({"status": "BEGIN", "id": self.transaction_id(txn[0])})
        for order, (account, delta) in enumerate(((a, -amount), (b, amount)), start=1):
            row = self.accounts[account]
            row.update(balance=row["balance"] + delta, moves=row["moves"] + 1)
            self._event(ACCOUNTS, account, "u", row, (txn[0], order))
        audit_id = len(self.audit) + 1
        self.audit[audit_id] = {"id": audit_id, "amount": amount}
        pending = dict(self.out)
        self._event(AUDIT, audit_id, "c", self.audit[audit_id], (txn[0], 3))
        if stall_audit:
            self.stalled = {k: v[len(pending.get(k, ())) :] for k, v in self.out.items()}
            self.stalled = {k: v for k, v in self.stalled.items() if v}
            self.out = {k: v[: len(pending.get(k, ()))] for k, v in self.out.items()}
        self._marker(self._end(txn[0]))
        return txn[0]

    def _end(self, txid: str) -> dict[str, Any]:
        self.lsn += 8
        return {
            "status": "END",
            "id": self.transaction_id(txid),
            "event_count": 3,
            "data_collections": [
                {"data_collection": ACCOUNTS, "event_count": 2},
                {"data_collection": AUDIT, "event_count": 1},
            ],
            "ts_ms": 1_718_000_000_000 + self.lsn,
        }

    def transaction_id(self, txid: str) -> str:
        """The id Debezium's PostgreSQL connector gives the record at hand of transaction
        ``txid``: ``<txId>:<LSN>``, the LSN that record's (an END's: the commit position)."""
        return f"{txid}:{self.lsn}"

    def release_stalled(self) -> None:
        for where, records in self.stalled.items():
            self.out.setdefault(where, []).extend(records)
        self.stalled = {}

    def _event(
        self, table: str, id_: int, op: str, row: dict[str, int], txn: tuple[str, int] | None
    ) -> None:
        self.lsn += 8
        fields = ACCOUNT_FIELDS if table == ACCOUNTS else AUDIT_FIELDS
        source = pg_source(self.lsn, table=table.split(".")[1], tx=self.txid)
        if op == "r":
            source["snapshot"] = "true"
        body = payload(op, after=dict(row), source=source)
        if txn is not None:
            body["transaction"] = {
                "id": self.transaction_id(txn[0]),
                "total_order": txn[1],
                "data_collection_order": 1,
            }
        topic = self.topics.accounts if table == ACCOUNTS else self.topics.audit
        parts = (
            self.topics.accounts_partitions if table == ACCOUNTS else self.topics.audit_partitions
        )
        record = (key({"id": id_}, KEY_FIELDS, table), value(body, fields, table))
        self.out.setdefault((topic, id_ % parts), []).append(record)

    def _marker(self, body: dict[str, Any]) -> None:
        raw_id = body["id"]
        record = (orjson.dumps({"id": raw_id}), orjson.dumps(body))
        where = (self.topics.transaction, self.marker_partition())
        if body["status"] == "END":
            self.ends.append((str(self.txid), where[1]))
        self.out.setdefault(where, []).append(record)

    def marker_partition(self) -> int:
        """The partition of the transaction topic the next marker goes to."""
        count = self.topics.transaction_partitions
        if count == 1:
            return 0
        if self.marker_rng is not None:
            return self.marker_rng.randrange(count)
        return self.txid % count

    def send(self, bootstrap: str, *, keep: Collection[tuple[str, int]] = ()) -> int:
        """Produce everything pending, per partition, but the records of the topic-partitions
        in ``keep`` (they stay pending: a partition that lags); returns how many records."""
        sent = 0
        for (topic, partition), records in sorted(self.out.items()):
            if (topic, partition) in keep:
                continue
            produce(bootstrap, topic, records, partition=partition)
            sent += len(records)
            self.produced[(topic, partition)] = self.produced.get((topic, partition), 0) + len(
                records
            )
        self.out = {where: records for where, records in self.out.items() if where in keep}
        return sent


# -- reading every lake version --------------------------------------------------------------


def job_commits(catalog: Catalog, name: str) -> dict[tuple[str, int], VersionInfo]:
    """(writer id, batch id) -> the history entry of table ``name`` that batch's commit made.

    Keyed by the writer too: a job that lost its checkpoint is a new writer whose batch ids
    start from 0 again, so batch ids alone would pair versions of two runs."""
    try:
        table = catalog.load_table(name)
    except TableNotFoundError:
        return {}
    return {(v.writer_id, v.batch_id): v for v in table.history(limit=10_000)}


def cuts(
    catalog: Catalog, tables: tuple[str, str] = (ACCOUNTS, AUDIT)
) -> Iterator[tuple[int, dict[str, list[dict[str, Any]]]]]:
    """For each committed batch, in commit order, numbered from 0: the accounts and audit
    tables' rows (keyed ``public.accounts`` and ``public.audit`` whatever the lake names) as
    that commit left them."""
    for number, state in batch_states(catalog, tables):
        yield number, {ACCOUNTS: state[tables[0]], AUDIT: state[tables[1]]}


def batch_states(
    catalog: Catalog, tables: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, list[dict[str, Any]]]]]:
    """For each committed batch that touched one of ``tables``, in commit order, numbered from
    0: every one of ``tables``' rows (keyed by its name) as that commit left them."""
    by_table = {t: job_commits(catalog, t) for t in tables}
    first_seen: dict[tuple[str, int], dt.datetime] = {}
    for versions in by_table.values():
        for batch, info in versions.items():
            first_seen[batch] = min(first_seen.get(batch, info.committed_at), info.committed_at)
    order = sorted(first_seen, key=first_seen.__getitem__)
    for number, batch in enumerate(order):
        state: dict[str, list[dict[str, Any]]] = {}
        for name, versions in by_table.items():
            known = [v.version for k, v in versions.items() if first_seen[k] <= first_seen[batch]]
            if not known:
                state[name] = []
                continue
            table = catalog.load_table(name)
            state[name] = table.scan(version=max(known)).to_arrow().to_pylist()
        yield number, state


def broken(state: dict[str, list[dict[str, Any]]], accounts: int) -> str | None:
    """Why a cut is not transaction-consistent, or None."""
    rows = state["public.accounts"]
    if len(rows) != accounts:
        return f"{len(rows)} accounts"
    total = sum(r["balance"] for r in rows)
    if total != accounts * START_BALANCE:
        return f"balances sum to {total}"
    moves, audits = sum(r["moves"] for r in rows), len(state["public.audit"])
    if moves != 2 * audits:
        return f"{moves} moves for {audits} audit rows"
    return None


def split(state: dict[str, list[dict[str, Any]]], accounts: int) -> str | None:
    """Why a lake version is no consistent cut published as a prefix of commit order, or None
    (:func:`broken` and more).

    Before the snapshot is in whole, balances still sum to the opening ones over the accounts
    there (an account a published transfer touched is there), and moves still count two per
    audit row; with every account in, :func:`broken` says it. Audit ids number the transfers in
    commit order: a prefix of it is ``1..n``."""
    rows, audits = state[ACCOUNTS], state[AUDIT]
    if len(rows) == accounts and (reason := broken(state, accounts)) is not None:
        return reason
    drift = sum(r["balance"] - START_BALANCE for r in rows)
    moves = sum(r["moves"] for r in rows)
    if drift or moves != 2 * len(audits):
        return f"{len(rows)} accounts drift by {drift}, {moves} moves for {len(audits)} transfers"
    ids = sorted(r["id"] for r in audits)
    if ids != list(range(1, len(ids) + 1)):
        return f"transfers {ids} are no prefix of commit order"
    return None


def split_versions(
    catalog: Catalog, accounts: int, tables: tuple[str, str] = (ACCOUNTS, AUDIT)
) -> tuple[int, list[tuple[int, str]]]:
    """How many batches committed to the bank's tables, and those (numbered as :func:`cuts`
    does) whose commit left a version :func:`split` finds fault with, with why."""
    states = list(cuts(catalog, tables))
    return len(states), [(n, why) for n, state in states if (why := split(state, accounts))]


def watermark_faults(
    catalog: Catalog, tables: tuple[str, ...] = (ACCOUNTS, AUDIT)
) -> tuple[int, list[str]]:
    """How many versions of ``tables`` carry a source watermark, and what is wrong with them:
    a table's watermark moving back from one version to the next, or naming exceptions."""
    marked, faults = 0, []
    for name in tables:
        history = sorted(catalog.load_table(name).history(limit=10_000), key=lambda v: v.version)
        last: str | None = None
        for info in history:
            point = info.source_watermark
            if point is None:
                continue
            marked += 1
            if last is not None and point.position < last:
                faults.append(
                    f"{name} v{info.version}: watermark back from {last} to {point.position}"
                )
            if info.watermark_exceptions:
                faults.append(f"{name} v{info.version}: exceptions {info.watermark_exceptions}")
            last = point.position
    return marked, faults


def held_and_pending(catalog: Catalog, job: str) -> tuple[int, int]:
    """From ``job``'s last commit: the transactions its book holds, and the END markers of a
    transaction topic of several partitions it keeps back, not yet in commit order's reach
    (:mod:`ingest.transactions.order`)."""
    progress = catalog.writer_progress(job)
    state = progress.job_state if progress is not None else None
    if not isinstance(state, dict):
        return 0, 0
    held, book = state.get("held"), state.get("transactions")
    transactions = int(held["transactions"]) if isinstance(held, dict) else 0
    order = book.get("order") if isinstance(book, dict) else None
    pending = order.get("pending") if isinstance(order, dict) else None
    return transactions, len(pending) if isinstance(pending, list) else 0
