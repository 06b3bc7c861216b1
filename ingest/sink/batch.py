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
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from catalog import (
    Catalog,
    CommitOp,
    CommitRequest,
    CommitResult,
    CommitStateUnknown,
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
    lost_to_concurrent_write,
    schema_from_base64,
    schema_to_base64,
)
from catalog.logs import get_logger
from ingest.config import IngestJobConfig
from ingest.errors import IngestError, SchemaChangeRefused
from ingest.failpoints import Failpoint
from ingest.kafka.offsets import OffsetsJson
from ingest.kafka.options import SourceOptions
from ingest.kafka.spark_source import SourceReader
from ingest.logs import driver_level
from ingest.sink.consistent import CandidateNotPublished
from ingest.sink.decoding import BatchDecoders
from ingest.sink.plan import SinkPlan
from ingest.sink.publication import EveryEvent, Publication
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
from ingest.sink.task import DEAD_LETTER_SCHEMA, widen_schema, write_task
from ingest.sink.whole import WholeTransactions
from ingest.transactions import TransactionMode

log = get_logger("lakestream.ingest")

#: Rebasing a commit that lost to a concurrent writer (the files do not depend on the table).
REBASE_RETRY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.2)
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
        #: The Spark job of the batch's last write pass (its tasks), for the batch's log line.
        self._job_ms = 0
        #: What each commit publishes: whole source transactions, or every event.
        self.publication: Publication = (
            WholeTransactions(catalog, settings.config, settings.kafka, self.guard)
            if settings.consistent
            else EveryEvent()
        )

    def read_ahead_first(self, start: OffsetsJson | None) -> None:
        """The query is about to start from ``start`` (None: Spark's checkpoint decides): in
        ``transactions: consistent``, check the transaction topic and begin reading its first
        range while Spark starts."""
        self.publication.begin_run(start)

    def close(self) -> None:
        """The query has ended: no batch will come."""
        self.publication.close()

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
        self.publication.begin(df, batch_id)
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
            self.publication.committed(request, result)
            seconds = (written - started, time.monotonic() - written)
            self._log(bound, reports, result, passes, seconds)
        self.publication.logged(bound, reports)
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
        reports = [read_report(row["report"], row["ranks"]) for row in rows]
        reports += spark_batch_ends(self.settings.config, batch_id)  # hook: source.reader
        too_many = self.settings.config.dead_letter_guard.check(topic_figures(reports))
        if too_many is not None:
            raise too_many
        self._check_tables(reports)
        published = self.publication.publish(reports, plan)
        if published is not reports:
            self._check_tables(published)  # held events it published may bring tables too
        return published

    def _check_tables(self, reports: Sequence[TaskReport]) -> None:
        """Create the tables the pass brought (and write again), or refuse a schema change.

        Raises:
            _TablesCreated: tables were created: the batch is written again.
            SchemaChangeRefused: a table cannot follow the source's schema change.
        """
        new = {t.table: t for r in reports for t in r.new_tables}
        if new:
            for new_table in new.values():
                self._create(new_table)
            raise _TablesCreated(new)
        refused = [x for r in reports for x in r.refused]
        if refused:
            raise SchemaChangeRefused(*refused[0])

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
        holding = self.publication.holding(self._bases)
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
        own = self.publication.commit_parts(has_files=bool(by_table))
        for part in own:
            by_table.pop(part.table, None)
        if not by_table and not own:
            return None
        commits = tuple(
            self._table_commit(name, files, reports) for name, files in sorted(by_table.items())
        )
        previous = self.guard.call(
            "writer_progress", lambda: self.catalog.writer_progress(self.settings.job)
        )
        base = previous.source_offsets if previous and previous.source_offsets else {}
        offsets = merge_offsets(base, *(r.offsets for r in reports))
        dead = self.settings.config.dead_letter_table.lower()
        return CommitRequest(
            tables=(*commits, *own),
            key=key,
            source_offsets=dict(offsets),
            progress_key=self.settings.job,
            **self.publication.progress(t for t in by_table if t != dead),
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


def _lag_ms(reports: Sequence[TaskReport]) -> int | None:
    stamps = [r.max_timestamp_ms for r in reports if r.max_timestamp_ms is not None]
    return int(time.time() * 1000) - max(stamps) if stamps else None
