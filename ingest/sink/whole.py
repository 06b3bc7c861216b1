"""``transactions: consistent`` as the sink sees it: a :class:`~ingest.sink.publication.Publication`
whose commits publish whole source transactions, a prefix of the source's commit order.

Per batch: the book of the job's last commit takes the batch's END markers, and the tasks write
the transactions that can have no event beyond the batch straight into the target tables and
hold every other event in the job's held table (:mod:`ingest.sink.consistent` says how). After
the tasks the book decides what the commit publishes; held events it publishes are read back and
written here with the tasks' own code. The held table's files, the book (``job_state``) and the
watermark are committed in the batch's one commit, so a restart resumes from the catalog alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from catalog import (
    Catalog,
    CommitOp,
    CommitRequest,
    CommitResult,
    DataFile,
    OutageGuard,
    PartitionCommit,
    Table,
    TableAlreadyExistsError,
    TableCommit,
    TableMeta,
    TableNotFoundError,
    stage_append,
)
from catalog.logs import get_logger
from ingest.config import IngestJobConfig
from ingest.errors import IngestError
from ingest.kafka.offsets import OffsetsJson
from ingest.kafka.offsets import from_json as offsets_from_json
from ingest.kafka.options import SourceOptions
from ingest.sink.consistent import (
    BatchTransactions,
    TxnPolicy,
    batch_ends,
    batch_ranges,
    check_order_at_start,
    files_after,
    load_book,
    release_held,
    resumed_start,
    start_batch,
)
from ingest.sink.held import COMPACTION_ENABLED, HELD_SCHEMA, chunks_of, held_table_name
from ingest.sink.plan import Holding, SinkPlan
from ingest.sink.readahead import MarkerReadAhead
from ingest.sink.report import TaskReport
from ingest.sink.task import write_chunks

__all__ = ["WholeTransactions"]

log = get_logger("lakestream.ingest")

#: The longest a read-ahead waits for a batch's tasks to start (a slow start, or the clocks of
#: a cluster's executors ahead of the driver's): the batch's tasks still run for a while after.
READ_AFTER_MAX_S = 1.0


class WholeTransactions:
    """The consistent part of one job's sink: its book, its held table, its read-ahead."""

    def __init__(
        self, catalog: Catalog, config: IngestJobConfig, kafka: SourceOptions, guard: OutageGuard
    ) -> None:
        self.catalog, self.config, self.kafka, self.guard = catalog, config, kafka, guard
        self.policy = TxnPolicy(config.max_hold_s, config.on_timeout, config.partition_idle_s)
        #: The batch's transaction state (None before the first batch).
        self.txn: BatchTransactions | None = None
        self._held: TableMeta | None = None
        #: The held table's version the batch's write pass was planned against, and its files
        #: (with their partitions) then.
        self._held_base = 0
        self._held_files: list[tuple[str, DataFile]] = []
        #: The held table's part of the batch's commit, when it publishes held events.
        self._held_commit: TableCommit | None = None
        #: The held table's version after the last commit and its files then, worked out from
        #: that commit (see :meth:`committed`).
        self._held_known: tuple[int, list[tuple[str, DataFile]]] | None = None
        #: Where the batch's plan of the held files came from ("last_commit" or "catalog").
        self._held_from = ""
        #: Figures of the batch's driver-side work, for its log line.
        self._start_ms = self._collect_ms = self._release_ms = self._released = 0
        #: The next batch's markers, read while this one's tasks run.
        self._readahead = MarkerReadAhead(kafka, self._collections())
        #: How long after a batch's start the read-ahead begins: as long as the first task of
        #: the batch before took to start (0 until a batch measured it).
        self._read_after_s = 0.0
        #: When this batch began its read-ahead (wall clock; None once measured).
        self._reads_begun: float | None = None

    # -- before the tasks --------------------------------------------------------------------

    def begin_run(self, start: OffsetsJson | None) -> None:
        """Refuse a partitioned transaction topic without commit positions, and begin reading
        the first batch's range of the transaction topic while Spark starts the query."""
        check_order_at_start(self.kafka)
        if start is None:
            start = resumed_start(self.config.checkpoint)
        if start:
            limit = self.kafka.max_offsets_per_trigger
            self._readahead.begin_first(offsets_from_json(start), limit)

    def begin(self, df: Any, batch_id: int) -> None:
        """The book of the job's last commit with this batch's markers added, and the
        transactions the tasks may write straight into the target tables."""
        started = time.monotonic()
        progress = self.guard.call(
            "writer_progress", lambda: self.catalog.writer_progress(self.config.job)
        )
        ranges = batch_ranges(df, self.config.checkpoint, batch_id)
        ends = batch_ends(self.config.checkpoint, batch_id)
        self._collect_ms = _ms_since(started)
        stored = (progress.source_offsets or {}) if progress is not None else {}
        known = {(topic, int(p)) for topic, parts in stored.items() for p in parts}
        known |= {(r.topic, r.partition) for r in ranges} | set(ends)
        self.txn = start_batch(
            load_book(progress, self._collections()),
            ranges,
            sorted(known),
            self.kafka,
            self.policy,
            readahead=self._readahead,
            read_after_s=self._read_after_s,
            ends=ends,
        )
        self._reads_begun = time.time()
        self.txn.timings["read_ahead_after_ms"] = round(self._read_after_s * 1000)
        self._start_ms = _ms_since(started)

    def holding(self, bases: dict[str, int]) -> Holding | None:
        """How the tasks split the batch; the held files of earlier batches go to the task of
        the batch's first range, which publishes or holds again their events."""
        txn = self._batch()
        held = self._held_table()
        self._held_commit = None
        base = self.guard.call("current_version", Table(self.catalog, held).current_version)
        bases[str(held.name)] = self._held_base = base
        known = self._held_known
        if known is not None and known[0] == base:
            self._held_files, self._held_from = list(known[1]), "last_commit"
        else:
            self._held_from = "catalog"
            plan = self.guard.call(
                "plan_held", lambda: Table(self.catalog, held).plan(version=base)
            )
            self._held_files = [(p.partition_desc, f) for p in plan.partitions for f in p.files]
        files = () if txn.owner is None else tuple(f for _, f in self._held_files)
        return Holding(held=held, publish=txn.publish, dissolve=files, owner=txn.owner)

    # -- after the tasks ---------------------------------------------------------------------

    def publish(self, reports: list[TaskReport], plan: SinkPlan) -> list[TaskReport]:
        """Decide what the commit publishes; the held events it publishes are decoded and
        written here, with the tasks' own code (see :mod:`ingest.sink.consistent`).

        Raises:
            CandidateNotPublished: a transaction the tasks wrote directly is not published
                (the sink writes the batch again).
        """
        txn, holding = self._batch(), plan.holding
        assert holding is not None
        self._time_read_ahead(reports)
        reports = [*reports, txn.marker_report]
        deciding = time.monotonic()
        decision = txn.decide(reports)
        released = time.monotonic()
        txn.timings["decide_ms"] = round((released - deciding) * 1000)
        self._release_ms = self._released = 0
        held_name = str(holding.held.name)
        new_files = [f for r in reports for f in r.files if f.table == held_name]
        held_before = holding.dissolve or txn.loaded.ended or txn.loaded.open
        if not new_files and not held_before:
            return reports  # nothing was held before, nothing is held now: nothing to read
        dissolved = _dissolved(holding, reports)
        # the tasks wrote every event of what they were told to publish; the rest is in their
        # new held files, read back only for what the decision publishes beyond it - and in
        # committed held files no task dissolved, read back for all it publishes
        if dissolved or not self._held_files:  # decide() checked the direct ones come first
            publish = frozenset(decision.publish[len(txn.direct) :]) - txn.settled
        else:
            publish = frozenset(decision.publish)
        release = release_held(
            holding.held,
            self._held_base,
            self._held_files,
            new_files,
            publish,
            write_remainder=partial(stage_append, holding.held),
            dissolved=dissolved,
        )
        self._held_commit = release.commit
        if release.replaces_new:
            reports = [
                r.model_copy(update={"files": [f for f in r.files if f.table != held_name]})
                for r in reports
            ]
        if release.rows.num_rows:
            published = write_chunks(chunks_of(release.rows), replace(plan, holding=None),
                                     TaskReport())  # fmt: skip
            reports = [*reports, published]
            self._released = release.rows.num_rows
        self._release_ms = _ms_since(released)
        return reports

    def commit_parts(self, has_files: bool) -> tuple[TableCommit, ...]:
        """The held table's part of the commit; when the batch wrote nothing but its book
        moved, a commit of the held table that adds nothing carries the book (a restart would
        otherwise start after markers it never stored)."""
        if self._held_commit is not None:
            return (self._held_commit,)
        txn = self._batch()
        if not has_files and txn.changed():
            held = self._held_table()
            part = PartitionCommit(partition_desc=held.spec.desc({}), ops=())
            return (TableCommit(table=str(held.name), op=CommitOp.APPEND, partitions=(part,)),)
        return ()

    def progress(self, targets: Iterable[str]) -> dict[str, Any]:
        """The book after the decision, and the watermark of the tables written to."""
        txn = self._batch()
        held = str(self._held_table().name)
        tables = [t for t in targets if t != held]
        return {"job_state": txn.job_state(), "source_watermark": txn.watermark(tables)}

    def committed(self, request: CommitRequest, result: CommitResult) -> None:
        """Work out the held table's files after the commit from the files the batch planned
        with and what the commit did to them, when it is the version right after the planned
        one (nothing else landed between them); else the next batch plans it from the catalog
        (four queries on every batch's critical path, for files the driver just committed)."""
        self._held_known = None
        if self._held is None or result.replayed:
            return
        name = str(self._held.name)
        commit = next((t for t in request.tables if t.table == name), None)
        if commit is not None and result.version_of(name) == self._held_base + 1:
            self._held_known = self._held_base + 1, files_after(self._held_files, commit)

    def logged(self, bound: Any, reports: Sequence[TaskReport]) -> None:
        """One line per batch with what the book decided, and the warnings."""
        txn = self._batch()
        if txn.decision is None or txn.after is None:
            return  # the batch was committed before (a replay): nothing was decided
        decision = txn.decision
        bound.info(
            "batch_transactions",
            markers=txn.markers,
            markers_read_ahead=txn.markers_read_ahead,
            candidates=len(txn.direct),
            published=len(decision.publish),
            exceptions=list(decision.exceptions),
            held_by_tasks=sum(r.held for r in reports),
            dissolved=sum(r.dissolved for r in reports),
            released=self._released,
            held=txn.after.summary(),
        )
        bound.debug(
            "batch_transactions_timings",
            start_ms=self._start_ms,
            collect_ms=self._collect_ms,
            release_ms=self._release_ms,
            held_files_from=self._held_from,
            **txn.timings,
        )
        self._warn(bound, txn, reports)

    def _warn(self, bound: Any, txn: BatchTransactions, reports: Sequence[TaskReport]) -> None:
        decision = txn.decision
        assert decision is not None
        malformed = sum(r.txn_ranks.malformed for r in reports)
        if malformed:
            bound.warning(
                "transaction_blocks_malformed",
                events=malformed,
                hint="these events were published as if they had no transaction block",
            )
        if decision.out_of_order:
            bound.warning(
                "transaction_out_of_order",
                ids=list(decision.out_of_order[:10]),
                count=len(decision.out_of_order),
                hint="their END came after later transactions were published (named in the "
                "commit's exceptions); raise transactions.partition_idle_s",
            )
        warning = decision.warning
        if warning is not None:
            bound.warning(
                "transactions_held_too_long",
                count=warning.count,
                oldest_age_s=round(warning.oldest_age_s, 1),
                ids=list(warning.ids),
                on_timeout=str(self.policy.on_timeout),
            )

    def close(self) -> None:
        self._readahead.close()

    # -- helpers -----------------------------------------------------------------------------

    def _batch(self) -> BatchTransactions:
        assert self.txn is not None, "begin() comes first"
        return self.txn

    def _time_read_ahead(self, reports: Sequence[TaskReport]) -> None:
        """How long after this batch began its read-ahead its first task started: the next
        batch's read-ahead waits as long (measured on a batch's first write pass)."""
        starts = [r.started_ms for r in reports if r.started_ms is not None]
        if starts and self._reads_begun is not None:
            lead = min(starts) / 1000 - self._reads_begun
            self._read_after_s = min(max(lead, 0.0), READ_AFTER_MAX_S)
        self._reads_begun = None

    def _collections(self) -> list[str] | None:
        """The data collections (``schema.table``) the job reads, when its topics are listed."""
        topics = self.config.topics
        if self.config.topic_pattern or not topics:
            return None
        return sorted(".".join(t.split(".")[-2:]) for t in topics if t.count(".") >= 2)

    def _held_table(self) -> TableMeta:
        if self._held is None:
            name = held_table_name(self.config.job)
            try:
                self._held = self._load(name).meta
            except TableNotFoundError:
                try:
                    # the sink rewrites the held files itself, in its own commits: a compaction
                    # in between would turn the next publish's removals stale
                    create = partial(
                        self.catalog.create_table,
                        name,
                        HELD_SCHEMA,
                        properties={COMPACTION_ENABLED: "false"},
                    )
                    self._held = self.guard.call("create_table", create).meta
                except TableAlreadyExistsError:
                    self._held = self._load(name).meta
        return self._held

    def _load(self, name: str) -> Table:
        return self.guard.call("load_table", partial(self.catalog.load_table, name))


def _dissolved(holding: Holding, reports: Sequence[TaskReport]) -> bool:
    """Whether a task dissolved the held files (:attr:`Holding.dissolve`): read every event
    of them back. None read means no task owned them (the driver reads them itself).

    Raises:
        IngestError: some but not all of their events were read: nothing is committed.
    """
    expected = sum(f.row_count for f in holding.dissolve)
    read = sum(r.dissolved for r in reports)
    if read not in (0, expected):
        raise IngestError(
            f"a task read back {read} of the {expected} held events; the batch is not committed"
        )
    return bool(holding.dissolve) and read == expected


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
