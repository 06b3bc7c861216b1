"""The driver half of the sink: one catalog commit per micro-batch, exactly once.

For batch ``b`` of writer incarnation ``w`` the commit's idempotency key is ``(w, b)``. Spark
replays a batch after a crash with the same id and the same offsets, so a replay whose commit
already landed is recognised and skipped; one that did not land is written again (files of the
crashed attempt are left for maintenance) and committed once. The offsets of every batch are
stored with its commit under the job's name, so a job whose checkpoint is lost resumes from the
catalog alone (see :mod:`ingest.job`).

Every catalog call of the driver goes through the job's :class:`catalog.OutageGuard`, so a
catalog failover is waited out within the outage budget instead of failing the query. A commit
whose outcome is unknown (the connection died at COMMIT) is resolved by the batch's key: it
landed, or the same files are committed again under the same key - never as a second batch.

Before the commit, the dead-letter guard (:mod:`ingest.sink.guard`) may refuse the batch; the
error is kept in :attr:`BatchSink.failure` so the job can report it as it was raised (Spark
wraps whatever ``foreachBatch`` raises in its own exception).
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from catalog import (
    Catalog,
    CommitOp,
    CommitRequest,
    CommitResult,
    CommitStateUnknown,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    OutageGuard,
    PartitionCommit,
    RetryPolicy,
    Table,
    TableAlreadyExistsError,
    TableCommit,
    TableMeta,
    TableNotFoundError,
    WriterProgress,
    lost_to_concurrent_write,
    schema_from_base64,
    schema_to_base64,
    stage_append,
)
from catalog.logs import get_logger
from ingest.config import IngestJobConfig
from ingest.errors import IngestError, SchemaChangeRefused
from ingest.failpoints import Failpoint
from ingest.kafka.brokerview import STARTUP_CHECK, BrokerView
from ingest.kafka.offsets import OffsetRange, OffsetsJson
from ingest.kafka.offsets import from_json as offsets_from_json
from ingest.kafka.options import SourceOptions
from ingest.kafka.spark_source import SourceReader
from ingest.logs import driver_level
from ingest.sink.consistent import (
    BatchTransactions,
    CandidateNotPublished,
    PeekedTails,
    PreparedStart,
    TxnPolicy,
    batch_ends,
    batch_ranges,
    check_order_at_start,
    files_after,
    load_book,
    peek_next,
    prepare_start,
    read_ahead_next,
    release_held,
    resumed_start,
    start_batch,
)
from ingest.sink.decoding import BatchDecoders
from ingest.sink.held import COMPACTION_ENABLED, HELD_SCHEMA, chunks_of, held_table_name
from ingest.sink.plan import Holding, SinkPlan
from ingest.sink.readahead import MarkerReadAhead
from ingest.sink.records import spark_batch_ends, write_spark_batch
from ingest.sink.report import (
    REPORT_ROW,
    NewTable,
    TaskReport,
    WrittenFile,
    merge_offsets,
    read_report,
    topic_figures,
    total_counts,
)
from ingest.sink.tables import create_cdc_table, known_tables
from ingest.sink.task import (
    DEAD_LETTER_SCHEMA,
    widen_schema,
    write_chunks,
    write_task,
)
from ingest.transactions import TransactionBook, TransactionMode

log = get_logger("lakestream.ingest")

#: Rebasing a commit that lost to a concurrent writer (the files do not depend on the table).
REBASE_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.2)
#: The longest a read-ahead waits for a batch's tasks to start (a slow start, or the clocks of
#: a cluster's executors ahead of the driver's): the batch's tasks still run for a while after.
READ_AFTER_MAX_S = 1.0
#: Write passes of one batch: a pass that brought new tables is written again at once, and so
#: is one whose directly written transactions turned out incomplete (consistent mode).
_WRITE_PASSES = RetryPolicy(attempts=4, base_delay=0.0, max_delay=0.0)


@functools.cache
def _report_type() -> Any:
    """What the tasks return (:data:`REPORT_ROW`) as Spark's type. Why not DDL text (``"report
    string, ..."``): ``mapInArrow`` has the JVM parse a DDL string, a py4j round trip of ~5 ms
    on every batch's critical path in the benchmark (either mode); a type is not parsed."""
    from pyspark.sql.pandas.types import from_arrow_schema  # the driver's: Spark's types

    return from_arrow_schema(REPORT_ROW)


def _write_again(error: Exception) -> bool:
    return isinstance(error, (_TablesCreated, CandidateNotPublished))


class _TablesCreated(IngestError):
    """A write pass brought tables the catalog lacked; they were created: write again."""

    def __init__(self, tables: Iterable[str]) -> None:
        super().__init__(
            f"new tables kept appearing in one batch ({', '.join(sorted(tables))}); giving up on it"
        )


@dataclass(frozen=True)
class SinkSettings:
    config: IngestJobConfig
    """The job's configuration (defined once, in :mod:`ingest.config`)."""
    incarnation: str
    """Changes when the Spark checkpoint is new, because Spark then restarts batch ids at 0."""
    kafka: SourceOptions = field(repr=False)
    """How the executor tasks read the offset ranges the source emits (``emit=ranges``)."""

    @property
    def job(self) -> str:
        """Stable name: the writer's progress is stored under it."""
        return self.config.job

    @property
    def writer_id(self) -> str:
        return f"{self.job}:{self.incarnation}"

    @property
    def consistent(self) -> bool:
        """``transactions: consistent`` (``auto`` decided by the subscription)."""
        return self.config.transaction_mode is TransactionMode.CONSISTENT


class BatchSink:
    """``foreachBatch`` callable; holds the catalog connection of the driver."""

    def __init__(
        self,
        catalog: Catalog,
        settings: SinkSettings,
        guard: OutageGuard | None = None,
        *,
        retry: RetryPolicy = REBASE_RETRY,
        observer: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.catalog = catalog
        #: Told each committed batch's figures (the job's metrics); must not raise.
        self.observer = observer
        self.settings = settings
        self.retry = retry
        """Bounds the rebases of a commit that lost to a concurrent write."""
        self.guard = guard or OutageGuard.fail_fast()
        """Every catalog call of the driver goes through it (a fail-fast one by default)."""
        tables = self.guard.call(
            "known_tables",
            lambda: known_tables(
                catalog,
                job=settings.job,
                source_format=settings.config.source_format,
                decoder=settings.config.decoder,
                json_tables=settings.config.json_tables,
                kafka=settings.kafka,
            ),
        )
        self._tables = tables - {settings.config.dead_letter_table.lower()}
        self._decoders = BatchDecoders(settings.config.decoder)
        self.batches_committed = 0
        self.records_read = 0
        self._batches_seen = 0
        #: Per table, the version the batch being written was planned against (see _plan).
        self._bases: dict[str, int] = {}
        #: What failed the last batch, as raised (Spark re-raises it wrapped in its own error).
        self.failure: Exception | None = None
        #: ``transactions: consistent``: the batch's transaction state (None in eventual mode).
        self._txn: BatchTransactions | None = None
        self._held: TableMeta | None = None
        #: The held table's part of the batch's commit, when it publishes held events.
        self._held_commit: TableCommit | None = None
        #: The held table's files (with their partitions) at the batch's planned version.
        self._held_files: list[tuple[str, DataFile]] = []
        #: The held table's version after the last commit and its files then, worked out from
        #: that commit (see _held_after): the next batch's plan of them when it finds the table
        #: at that version.
        self._held_known: tuple[int, list[tuple[str, DataFile]]] | None = None
        #: Where the batch's plan of the held files came from ("last_commit" or "catalog").
        self._held_from = ""
        #: Figures of the batch's consistent-mode work on the driver, for its log line.
        self._txn_ms = self._release_ms = self._released = self._collect_ms = 0
        #: The Spark job of the batch's last write pass (its tasks), for the batch's log line.
        self._job_ms = 0
        self._policy = TxnPolicy(
            settings.config.max_hold_s,
            settings.config.on_timeout,
            settings.config.partition_idle_s,
        )
        #: ``transactions: consistent``: the next batch's markers, read while this one's tasks run.
        self._readahead = MarkerReadAhead(settings.kafka, self._collections())
        #: How long after a batch's start the read-ahead begins reading: as long as the first
        #: task of the batch before took to start (0 until a batch measured it).
        self._read_after_s = 0.0
        #: When this batch began its read-ahead (wall clock; None once measured).
        self._reads_begun: float | None = None
        #: ``transactions: consistent``: the next batch's start, worked out after this one's
        #: commit from the book it committed.
        self._preparing: Future[PreparedStart] | None = None
        self._prepare_pool: ThreadPoolExecutor | None = None
        self._broker: BrokerView | None = None
        #: The tails of the next batch's likely ranges, peeked while this batch's tasks run.
        self._peeking: Future[PeekedTails] | None = None
        #: Set when this batch's tasks have ended (or the job stops): the peek begins then at
        #: the latest.
        self._peek_go: threading.Event | None = None

    def read_ahead_first(self, start: OffsetsJson | None) -> None:
        """``transactions: consistent``: begin reading the first batch's range of the
        transaction topic now, while Spark starts the query (``start``: where the job starts
        in every partition, None when Spark's checkpoint decides; see
        :meth:`MarkerReadAhead.begin_first`)."""
        if not self.settings.consistent:
            return
        check_order_at_start(self.settings.kafka)
        if start is None:
            start = resumed_start(self.settings.config.checkpoint)
        if start:
            limit = self.settings.kafka.max_offsets_per_trigger
            self._readahead.begin_first(offsets_from_json(start), limit)
            self._prepare_first(start)

    def close(self) -> None:
        """Stop reading ahead (the query has ended: no batch will use it)."""
        if self._peek_go is not None:
            self._peek_go.set()
        if self._prepare_pool is not None:
            self._prepare_pool.shutdown(wait=True, cancel_futures=True)
            self._prepare_pool = None
        if self._broker is not None:
            self._broker.close()
            self._broker = None
        self._readahead.close()

    def __call__(self, df: Any, batch_id: int) -> None:
        """Write and commit one micro-batch, exactly once per ``(writer, batch_id)``.

        Raises:
            TooManyDeadLetters: the dead-letter guard refused the batch; nothing committed.
            SchemaChangeRefused: a table cannot follow the source's schema change.
            IngestError: new tables kept appearing in one batch.
            CommitConflict: a concurrent commit won every rebase of ``retry``.
            CatalogOutageError: the catalog stayed unreachable past the outage budget.
        """
        batch_of_run, self._batches_seen = self._batches_seen, self._batches_seen + 1
        try:
            self._batch(df, batch_id, batch_of_run)
        except Exception as exc:
            self.failure = exc
            raise

    def _batch(self, df: Any, batch_id: int, batch_of_run: int) -> None:
        key = IdempotencyKey(writer_id=self.settings.writer_id, batch_id=batch_id)
        bound = log.bind(job=self.settings.job, batch=batch_id)
        if self._resolve(key) is not None:
            bound.info("batch_already_committed")
            return
        started = time.monotonic()
        self._txn = self._start_transactions(df, batch_id) if self.settings.consistent else None
        self._txn_ms = round((time.monotonic() - started) * 1000)
        reports, passes = self._write(df, batch_id)
        written = time.monotonic()
        self._trip(Failpoint.BATCH_WRITTEN, batch_of_run)
        request = self._request(reports, key)
        records = sum(r.records for r in reports)
        if request is None:
            bound.info("batch_empty", records=records, passes=passes)
        else:
            result = self._commit(request)
            self.batches_committed += 1
            self._held_known = self._held_after(request, result)
            if not result.replayed:
                self._prepare_next(request, result.commit_id)
            seconds = (written - started, time.monotonic() - written)
            self._log(bound, reports, result, passes, seconds)
        if self._txn is not None:
            self._log_transactions(bound, reports)
        self.records_read += records
        self._trip(Failpoint.BATCH_COMMITTED, batch_of_run)

    def _trip(self, point: Failpoint, batch_of_run: int) -> None:
        if self.settings.config.fail_at is not None:
            self.settings.config.fail_at.trip(point, batch_of_run)

    # -- writing ---------------------------------------------------------------------------

    def _write(self, df: Any, batch_id: int) -> tuple[list[TaskReport], int]:
        """Run the executor tasks; if the batch brought tables the catalog lacks, create them
        and write again (a rare second pass; the first pass's files become leftovers). Returns
        the reports and how many passes it took (logged: a second pass doubles a batch's cost).

        A batch the dead-letter guard refuses fails here, before any table is created or
        anything committed."""

        def attempt(passes: int) -> tuple[list[TaskReport], int]:
            return self._write_pass(df, batch_id), passes

        return _WRITE_PASSES.run(attempt, retry_if=_write_again)

    def _write_pass(self, df: Any, batch_id: int) -> list[TaskReport]:
        plan = self._plan(batch_id)
        started = time.monotonic()
        if self.settings.config.source_reader is SourceReader.SPARK:  # hook: source.reader
            rows = write_spark_batch(df, plan, _report_type())  # records, not ranges
        else:
            rows = df.mapInArrow(partial(write_task, plan=plan), _report_type()).collect()
        self._job_ms = round((time.monotonic() - started) * 1000)
        if self._peek_go is not None:
            self._peek_go.set()  # the tasks have ended: a peek still waiting begins
        reports = [read_report(row["report"], row["ranks"], row["placed"]) for row in rows]
        reports += spark_batch_ends(self.settings.config, batch_id)  # hook: source.reader
        if self._txn is not None:
            self._time_read_ahead(reports)
            reports.append(self._txn.marker_report)
        too_many = self.settings.config.dead_letter_guard.check(topic_figures(reports))
        if too_many is not None:
            raise too_many
        new = {t.table: t for r in reports for t in r.new_tables}
        if new:
            for new_table in new.values():
                self._create(new_table)
            raise _TablesCreated(new)
        refused = [x for r in reports for x in r.refused]
        if refused:
            raise SchemaChangeRefused(*refused[0])
        if self._txn is not None:
            return self._publish_held(reports, plan)
        return reports

    # -- transactions: consistent --------------------------------------------------------------

    def _start_transactions(self, df: Any, batch_id: int) -> BatchTransactions:
        """The book of the job's last commit with this batch's markers added, and the
        transactions the tasks may write straight into the target tables."""
        progress = self.guard.call(
            "writer_progress", lambda: self.catalog.writer_progress(self.settings.job)
        )
        collect_started = time.monotonic()
        ranges = batch_ranges(df, self.settings.config.checkpoint, batch_id)
        ends = batch_ends(self.settings.config.checkpoint, batch_id)
        self._collect_ms = round((time.monotonic() - collect_started) * 1000)
        known = (
            {
                (topic, int(p))
                for topic, parts in ((progress.source_offsets or {}) if progress else {}).items()
                if isinstance(parts, dict)
                for p in parts
            }
            | {(r.topic, r.partition) for r in ranges}
            | set(ends)
        )
        prepared = self._take_prepared()
        base = progress.commit_id if progress is not None else None
        after_s = self._read_after_s
        if prepared is not None and prepared.base == base and prepared.fits(ranges, known):
            read_ahead_next(ranges, self._readahead, after_s=after_s)
            txn = prepared.adopted()
        else:
            txn = start_batch(
                load_book(progress, self._collections()),
                ranges,
                sorted(known),
                self.settings.kafka,
                self._policy,
                readahead=self._readahead,
                read_after_s=after_s,
                ends=ends,
            )
        self._reads_begun = time.time()
        txn.timings["read_ahead_after_ms"] = round(after_s * 1000)
        self._peek_next(progress, ranges)
        return txn

    def _time_read_ahead(self, reports: Sequence[TaskReport]) -> None:
        """How long after this batch began its read-ahead its first task started: the next
        batch's read-ahead waits as long (:func:`~ingest.sink.consistent.read_ahead_next`).
        Measured on a batch's first write pass (a second one's tasks start after the first's)."""
        starts = [r.started_ms for r in reports if r.started_ms is not None]
        if starts and self._reads_begun is not None:
            lead = min(starts) / 1000 - self._reads_begun
            self._read_after_s = min(max(lead, 0.0), READ_AFTER_MAX_S)
        self._reads_begun = None

    def _peek_next(self, progress: WriterProgress | None, ranges: Sequence[OffsetRange]) -> None:
        """Begin peeking the tails of the next batch's likely ranges (from where this batch's
        ranges end) on the prepare thread once this batch's tasks run: as long after now as
        its read-ahead waits, or when the tasks end if sooner
        (:func:`~ingest.sink.consistent.peek_next`); the next batch's prepared start takes
        them when its ranges are the ones peeked."""
        start = _offsets_json(progress.source_offsets if progress is not None else None)
        for rng in ranges:
            start.setdefault(rng.topic, {})[str(rng.partition)] = rng.end
        pool, broker = self._prepare_thread()
        self._peek_go = threading.Event()
        self._peeking = pool.submit(
            peek_next,
            start,
            self.settings.kafka,
            broker,
            after_s=self._read_after_s,
            go=self._peek_go,
        )

    def _prepare_next(self, request: CommitRequest, commit_id: uuid.UUID) -> None:
        """In ``transactions: consistent``, after ``request`` committed as ``commit_id``, begin
        working out the next batch's start on a driver thread
        (:func:`~ingest.sink.consistent.prepare_start`) from the book it committed: it runs
        while Spark writes its logs and plans the next batch, which takes it only if it starts
        from that commit.

        Not while the batch commits: begun before the commit, it held the GIL against the
        commit's own Python work (commit_ms 30 -> 100 in the benchmark)."""
        txn = self._txn
        if txn is None or txn.after is None or not request.source_offsets:
            return
        self._launch_prepare(txn.after, commit_id, _offsets_json(request.source_offsets))

    def _prepare_first(self, start: OffsetsJson) -> None:
        """Begin working out the job's first batch's start (as :meth:`_prepare_next` does
        for the batches after it) from the book of the job's last commit, while Spark starts
        the query (~2 s): the first batch of a run is the one every restart waits for, and
        working its start out itself took it 120-250 ms in the benchmark.

        On the 2-core benchmark machine this moves that work rather than hiding it: Spark's
        start keeps both cores busy, and a consistent run's first commit still trails an
        eventual one's by ~0.3-0.4 s (bench/RESULTS.md). A driver with a core to spare
        while Spark starts gets the batch's start for nothing."""
        progress = self.guard.call(
            "writer_progress", lambda: self.catalog.writer_progress(self.settings.job)
        )
        base = progress.commit_id if progress is not None else None
        self._launch_prepare(load_book(progress, self._collections()), base, start)

    def _launch_prepare(
        self, book: TransactionBook, base: uuid.UUID | None, start: OffsetsJson
    ) -> None:
        """Work the start of a batch from ``start`` out on the prepare thread, from ``book``
        (the book of commit ``base``; None: the job has none yet)."""
        pool, broker = self._prepare_thread()
        peeking, self._peeking = self._peeking, None

        def prepare() -> PreparedStart:
            # the peek ran before on this one thread: done by now, or failed (peeked again)
            peeked = None
            if peeking is not None and peeking.exception() is None:
                peeked = peeking.result()
            return prepare_start(
                book,
                start,
                self.settings.kafka,
                base=base,
                policy=self._policy,
                readahead=self._readahead,
                broker=broker,
                peeked=peeked,
            )

        self._preparing = pool.submit(prepare)

    def _prepare_thread(self) -> tuple[ThreadPoolExecutor, BrokerView]:
        """The driver's one thread that prepares batches, and its broker view."""
        if self._prepare_pool is None:
            self._prepare_pool = ThreadPoolExecutor(1, thread_name_prefix="lakestream-prepare")
        if self._broker is None:
            self._broker = BrokerView(self.settings.kafka.kafka_config, STARTUP_CHECK)
        return self._prepare_pool, self._broker

    def _take_prepared(self) -> PreparedStart | None:
        """The start worked out after the last commit, if any (waited for: it may still be
        using the read-ahead, and it is bounded by the broker timeouts a batch has anyway)."""
        preparing, self._preparing = self._preparing, None
        if preparing is None:
            return None
        try:
            return preparing.result()
        except Exception as exc:  # the batch works its start out itself
            log.info("batch_start_not_prepared", job=self.settings.job, error=str(exc))
            return None

    def _collections(self) -> list[str] | None:
        """The data collections (``schema.table``) the job reads, when its topics are listed."""
        topics = self.settings.config.topics
        if self.settings.config.topic_pattern or not topics:
            return None
        return sorted(".".join(t.split(".")[-2:]) for t in topics if t.count(".") >= 2)

    def _held_table(self) -> TableMeta:
        if self._held is None:
            name = held_table_name(self.settings.job)
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

    def _publish_held(self, reports: list[TaskReport], plan: SinkPlan) -> list[TaskReport]:
        """Decide what the commit publishes; the held events it publishes are decoded and
        written here, with the tasks' own code (see :mod:`ingest.sink.consistent`)."""
        txn = self._txn
        assert txn is not None and plan.holding is not None
        deciding = time.monotonic()
        decision = txn.decide(reports)
        released = time.monotonic()
        txn.timings["decide_ms"] = round((released - deciding) * 1000)
        self._release_ms = self._released = 0
        held_name = str(plan.holding.held.name)
        new_files = [f for r in reports for f in r.files if f.table == held_name]
        held_before = plan.holding.dissolve or txn.loaded.ended or txn.loaded.open
        if not new_files and not held_before:
            return reports  # nothing was held before, nothing is held now: nothing to read
        dissolved = _dissolved(plan.holding, reports)
        # the tasks wrote every event of what they were told to publish; the rest is in their
        # new held files, read back only for what the decision publishes beyond it - and in
        # committed held files no task dissolved, read back for all it publishes. (Without
        # committed held files, a run's first batch read the new ones for every transaction
        # the decision published: 40-70 ms of its critical path in the benchmark.)
        if dissolved or not self._held_files:  # decide() checked the direct ones come first
            publish = frozenset(decision.publish[len(txn.direct) :]) - txn.settled
        else:
            publish = frozenset(decision.publish)
        release = release_held(
            plan.holding.held,
            self._bases[held_name],
            self._held_files,
            new_files,
            publish,
            write_remainder=lambda rows: self._stage_held(plan.holding, rows),
            dissolved=dissolved,
        )
        self._held_commit = release.commit
        if release.replaces_new:
            reports = [
                r.model_copy(update={"files": [f for f in r.files if f.table != held_name]})
                for r in reports
            ]
        if release.rows.num_rows == 0:
            self._release_ms = round((time.monotonic() - released) * 1000)
            return reports
        direct = replace(plan, holding=None)
        published = write_chunks(chunks_of(release.rows), direct, TaskReport())
        self._release_ms = round((time.monotonic() - released) * 1000)
        self._released = release.rows.num_rows
        if published.new_tables or published.refused:
            return self._checked([*reports, published])
        return [*reports, published]

    def _checked(self, reports: list[TaskReport]) -> list[TaskReport]:
        new = {t.table: t for r in reports for t in r.new_tables}
        for new_table in new.values():
            self._create(new_table)
        if new:
            raise _TablesCreated(new)
        refused = [x for r in reports for x in r.refused]
        raise SchemaChangeRefused(*refused[0])

    def _log_transactions(self, bound: Any, reports: Sequence[TaskReport]) -> None:
        """One line per batch with what the book decided, and the hold warning (at most once
        a minute: the book remembers when it last warned)."""
        txn = self._txn
        assert txn is not None and txn.decision is not None and txn.after is not None
        decision, summary = txn.decision, txn.after.summary()
        bound.info(
            "batch_transactions",
            markers=txn.markers,
            markers_read_ahead=txn.markers_read_ahead,
            start_prepared="prepared_ms" in txn.timings,
            candidates=len(txn.direct),
            published=len(decision.publish),
            exceptions=list(decision.exceptions),
            held_by_tasks=sum(r.held for r in reports),
            dissolved=sum(r.dissolved for r in reports),
            released=self._released,
            start_ms=self._txn_ms,
            **txn.timings,
            collect_ms=self._collect_ms,
            release_ms=self._release_ms,
            held_files_from=self._held_from,
            held=summary,
        )
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
                on_timeout=str(self._policy.on_timeout),
            )

    def _holding(self, held: TableMeta) -> Holding:
        """How the tasks split the batch; the held files of earlier batches go to the task of
        the batch's first range, which publishes or holds again their events."""
        txn = self._txn
        assert txn is not None
        base = self._bases[str(held.name)]
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

    def _held_after(
        self, request: CommitRequest, result: CommitResult
    ) -> tuple[int, list[tuple[str, DataFile]]] | None:
        """The held table's version after ``result`` and its files then, from the files the
        batch planned with and what its commit did to them - when that commit is the version
        right after the planned one (nothing else landed between them). None otherwise: the
        next batch plans the table from the catalog.

        Why: the plan, four queries, was 10-15 ms of every consistent batch's critical path
        in the benchmark, for files the driver had just committed itself."""
        if self._txn is None or self._held is None or result.replayed:
            return None
        name = str(self._held.name)
        planned = self._bases.get(name)
        commit = next((t for t in request.tables if t.table == name), None)
        if planned is None or commit is None:
            return None
        if result.version_of(name) != planned + 1:
            return None
        return planned + 1, files_after(self._held_files, commit)

    @staticmethod
    def _stage_held(holding: Holding | None, rows: Any) -> TableCommit:
        assert holding is not None
        return stage_append(holding.held, rows)

    def _plan(self, batch_id: int) -> SinkPlan:
        """The tables the batch writes, and the version of each it is planned against.

        The versions are taken here, before any file is written, and the batch commits against
        them (:meth:`_table_commit`), so the conflict matrix sees every commit that landed while
        the batch was being written - a batch UPDATE/DELETE included. The batch is then rebased
        after the statement: by the sink (:meth:`_commit`) when the matrix fails its first
        attempt (append tables; CDC tables ordered by commit), by the matrix itself on CDC
        tables that declare ``commit.concurrent-merge`` (those the job creates). Rebasing is
        right because a batch is a blind write (the source's changes, decoded without reading
        the table): it lands exactly the files a recomputation would write, as if the batch had
        begun after the statement. On CDC tables ordered by source position the order is also
        the source's: a statement's rows keep the position of the rows they replace, so a
        change the source made later wins over them, whichever commits first, and a replayed
        older one never undoes them (see ``catalog.dml``)."""
        metas = {}
        self._bases = {}
        for name in sorted(self._tables):
            try:
                table = self._load(name)
                self._bases[name] = self.guard.call("current_version", table.current_version)
            except TableNotFoundError:
                continue
            metas[name] = table.meta
        dead = self._dead_letter_table()
        dead_table = Table(self.catalog, dead)
        self._bases[str(dead.name)] = self.guard.call("current_version", dead_table.current_version)
        holding = None
        self._held_commit = None
        if self._txn is not None:
            held = self._held_table()
            self._bases[str(held.name)] = self.guard.call(
                "current_version", Table(self.catalog, held).current_version
            )
            holding = self._holding(held)
        return SinkPlan(
            source_format=self.settings.config.source_format,
            decoder=self._decoders.for_tables(metas),
            tables=metas,
            dead_letters=dead,
            batch_id=batch_id,
            writer=self.settings.writer_id,
            json_tables=self.settings.config.json_tables,
            log_level=driver_level(),
            kafka=self.settings.kafka,
            holding=holding,
        )

    def _dead_letter_table(self) -> TableMeta:
        name = self.settings.config.dead_letter_table
        try:
            return self._load(name).meta
        except TableNotFoundError:
            try:
                create = partial(self.catalog.create_table, name, DEAD_LETTER_SCHEMA)
                return self.guard.call("create_table", create).meta
            except TableAlreadyExistsError:
                return self._load(name).meta

    def _create(self, new: NewTable) -> None:
        """Create a table the batch brought (with the schema its rows carry, or the declared
        one for schemaless messages); logs whether it was really created."""
        schema = schema_from_base64(new.schema_b64)
        partition_by = self.settings.config.partition_by.get(new.table, ())
        self._tables.add(new.table)
        try:
            if new.kind == "cdc":
                create = partial(
                    create_cdc_table,
                    self.catalog,
                    new.table,
                    schema,
                    primary_key=new.primary_key,
                    hash_buckets=self.settings.config.hash_buckets,
                    partition_by=partition_by,
                )
            else:
                create = partial(
                    self.catalog.create_table, new.table, schema, partition_by=list(partition_by)
                )
            self.guard.call("create_table", create)
        except TableAlreadyExistsError:
            log.info("table_found", table=new.table, reason="exists, unknown when the job started")
            return
        log.info("table_created_from_stream", table=new.table, kind=new.kind, columns=len(schema))

    # -- committing ------------------------------------------------------------------------

    def _request(self, reports: Sequence[TaskReport], key: IdempotencyKey) -> CommitRequest | None:
        by_table: dict[str, list[WrittenFile]] = defaultdict(list)
        for report in reports:
            for written in report.files:
                by_table[written.table].append(written)
        held = self._held_commit if self._txn is not None else None
        if held is not None:
            by_table.pop(held.table, None)
        if not by_table and held is None and not self._book_changed():
            return None
        commits = tuple(
            self._table_commit(name, files, reports) for name, files in sorted(by_table.items())
        )
        previous = self.guard.call(
            "writer_progress", lambda: self.catalog.writer_progress(self.settings.job)
        )
        base = previous.source_offsets if previous and previous.source_offsets else {}
        offsets = merge_offsets(base, *(r.offsets for r in reports))
        request = CommitRequest(
            tables=commits or (self._empty_held_commit(),),
            key=key,
            source_offsets=dict(offsets),
            progress_key=self.settings.job,
        )
        if self._txn is None:
            return request
        if held is not None:
            request = request.model_copy(update={"tables": (*commits, held)})
        targets = [t for t in by_table if t not in self._own_tables()]
        return request.model_copy(
            update={
                "job_state": self._txn.job_state(),
                "source_watermark": self._txn.watermark(targets),
            }
        )

    def _book_changed(self) -> bool:
        """Markers or events moved the book: its new state must be committed even when the
        batch wrote no file, or a restart would start after markers it never stored."""
        return self._txn is not None and self._txn.changed()

    def _own_tables(self) -> set[str]:
        names = {self.settings.config.dead_letter_table.lower()}
        if self._held is not None:
            names.add(str(self._held.name))
        return names

    def _empty_held_commit(self) -> TableCommit:
        """A commit of the held table that adds nothing: it carries the job's state alone."""
        held = self._held_table()
        return TableCommit(
            table=str(held.name),
            op=CommitOp.APPEND,
            partitions=(PartitionCommit(partition_desc=held.spec.desc({}), ops=()),),
        )

    def _table_commit(
        self, name: str, files: Iterable[WrittenFile], reports: Sequence[TaskReport]
    ) -> TableCommit:
        meta = self._load(name).meta
        parts: dict[str, list[FileOp]] = defaultdict(list)
        for written in files:
            parts[written.partition_desc].append(FileOp(action=FileAction.ADD, file=written.file))
        evolved = [schema_from_base64(r.evolved[name]) for r in reports if name in r.evolved]
        evolve_to = None
        if evolved:
            union, refused = widen_schema(meta, evolved)
            if refused is not None:
                raise SchemaChangeRefused(name, *refused)
            evolve_to = schema_to_base64(union)
        return TableCommit(
            table=name,
            op=CommitOp.MERGE if meta.is_cdc else CommitOp.APPEND,
            partitions=tuple(
                PartitionCommit(partition_desc=d, ops=tuple(ops))
                for d, ops in sorted(parts.items())
            ),
            base_version=self._planned_base(name),
            evolve_to=evolve_to,
        )

    def _planned_base(self, name: str) -> int:
        """The version the batch was planned against (every table it wrote files to was
        planned; the current version only for a table the plan did not know)."""
        planned = self._bases.get(name)
        return planned if planned is not None else self._current_version(name)

    def _commit(self, request: CommitRequest) -> CommitResult:
        """Commit; a concurrent write rebases (the files do not depend on the table's state)."""
        requests = [request]

        def attempt(n: int) -> CommitResult:
            if n > 1:
                requests.append(self._rebased(requests[-1]))
            return self._land(requests[-1])

        return self.retry.run(attempt, retry_if=lost_to_concurrent_write)

    def _rebased(self, request: CommitRequest) -> CommitRequest:
        tables = tuple(
            tc.model_copy(update={"base_version": self._current_version(tc.table)})
            for tc in request.tables
        )
        return request.model_copy(update={"tables": tables})

    def _land(self, request: CommitRequest) -> CommitResult:
        """One commit through the outage guard. An unknown outcome is resolved by the key:
        landed, its result stands; not landed, the same request is committed again, and the
        committer recognises the key should the first attempt land after all."""
        try:
            return self.guard.call("commit", partial(self.catalog.commit, request))
        except CommitStateUnknown as exc:
            log.warning(
                "commit_outcome_unknown", job=self.settings.job, batch=exc.batch_id, error=str(exc)
            )
        found = self._resolve(request.key)
        if found is not None:
            log.info("commit_resolved", job=self.settings.job, batch=request.key.batch_id)
            return found
        return self.guard.call(
            "commit", partial(self.catalog.commit, request), retry_also=(CommitStateUnknown,)
        )

    # -- catalog reads ---------------------------------------------------------------------

    def _load(self, name: str) -> Table:
        return self.guard.call("load_table", partial(self.catalog.load_table, name))

    def _current_version(self, name: str) -> int:
        return self.guard.call(
            "current_version", lambda: self.catalog.load_table(name).current_version()
        )

    def _resolve(self, key: IdempotencyKey) -> CommitResult | None:
        return self.guard.call(
            "resolve_commit", partial(self.catalog.resolve_commit, key.writer_id, key.batch_id)
        )

    def _log(
        self,
        bound: Any,
        reports: Sequence[TaskReport],
        result: CommitResult,
        passes: int,
        seconds: tuple[float, float],
    ) -> None:
        write_s, commit_s = seconds
        counts = total_counts(reports)
        files = sum(len(r.files) for r in reports)
        figures = dict(
            records=sum(r.records for r in reports),
            tables={
                t: {
                    "rows": c.rows,
                    "upserts": c.upserts,
                    "deletes": c.deletes,
                    "partial": c.partial,
                    "planned_version": self._bases.get(t),
                    "version": result.version_of(t),
                }
                for t, c in counts.items()
            },
            files=files,
            bytes=sum(f.file.size_bytes for r in reports for f in r.files),
            dead_letters=sum(r.dead_letters for r in reports),
            ignored=sum(r.ignored for r in reports),
            tombstones=sum(r.tombstones for r in reports),
            passes=passes,
            write_ms=round(write_s * 1000),
            job_ms=self._job_ms,
            task_cpu_ms=sum(r.cpu_ms for r in reports),
            task_wall_ms=max((r.wall_ms for r in reports), default=0),
            commit_ms=round(commit_s * 1000),
            attempts=result.attempts,
            lag_ms=_lag_ms(reports),
        )
        bound.info("batch_committed", **figures)
        if self.observer is not None:
            self.observer(figures)


def _offsets_json(source_offsets: Mapping[str, Any] | None) -> OffsetsJson:
    """A commit's ``source_offsets`` (topic -> partition -> next offset, as stored) in the
    source's offset JSON."""
    return {
        topic: {str(p): int(o) for p, o in parts.items()}
        for topic, parts in (source_offsets or {}).items()
        if isinstance(parts, dict)
    }


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


def _lag_ms(reports: Sequence[TaskReport]) -> int | None:
    stamps = [r.max_timestamp_ms for r in reports if r.max_timestamp_ms is not None]
    return int(time.time() * 1000) - max(stamps) if stamps else None
