"""Partition TTL (seed 000): drop the partitions whose date or timestamp value has expired.

A table with ``partition.ttl`` (e.g. ``30d``) on a date or timestamp range partition column
loses every partition whose value is older than ``now - ttl``: one commit of op ``update``
deletes all their files from the snapshot (CDC tables: every bucket of such a partition). The
files stay readable by time travel to earlier versions and go to cleanup when those versions
expire. A partition whose value is null never expires.

The drop follows the conflict matrix like any update: a concurrent append or merge into a
partition being dropped makes it fail, and it is planned again at the new version (bounded
attempts); a concurrent compaction is overwritten.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from catalog.errors import CommitConflict, ConflictKind
from catalog.logs import get_logger
from catalog.model import CommitOp, FileAction, FileOp, IdempotencyKey, PartitionCommit
from catalog.partitioning import typed_value
from catalog.planning import PartitionScan
from catalog.retry import RetryPolicy

if TYPE_CHECKING:
    from catalog.table import Table

log = get_logger("lakestream.catalog.maintenance")

#: A drop that lost to a concurrent append or merge is planned again at the new version.
TTL_RETRY = RetryPolicy(attempts=5, base_delay=0.05, max_delay=1.0)


@dataclass(frozen=True)
class TtlReport:
    table: str
    column: str
    cutoff: str
    partitions_dropped: int
    files_dropped: int
    rows_dropped: int
    version: int | None
    """The update commit's version (None: nothing expired, or a dry run)."""
    attempts: int
    dry_run: bool
    partitions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["partitions"] = list(self.partitions)
        return out


def expired(value: object, cutoff: dt.datetime) -> bool:
    """Whether a partition value lies before the cutoff (dates: the whole day does)."""
    if value is None:
        return False
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return moment < cutoff
    if isinstance(value, dt.date):
        return value < cutoff.astimezone(dt.UTC).date()
    raise TypeError(f"partition TTL needs a date or timestamp value, got {value!r}")


def drop_expired_partitions(
    table: Table,
    *,
    ttl: dt.timedelta,
    column: str,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    retry: RetryPolicy | None = None,
) -> TtlReport:
    """Drop partitions older than ``ttl`` in one ``update`` commit; returns what it did.

    Raises:
        CommitConflict: concurrent writes into the doomed partitions won every attempt.
    """
    moment = now or dt.datetime.now(dt.UTC)
    cutoff = moment - ttl
    arrow_type = table.schema.field(column).type

    def attempt(number: int) -> TtlReport:
        base = table.current_version()
        doomed = [
            p
            for p in table.plan(version=base).partitions
            if expired(typed_value(p.values.get(column), arrow_type), cutoff)
        ]
        if dry_run or not doomed:
            return _report(table, column, cutoff, doomed, attempts=number, dry_run=dry_run)
        result = table.commit(
            CommitOp.UPDATE,
            [_drop(p) for p in doomed],
            base_version=base,
            key=IdempotencyKey.anonymous(),
        )
        version = result.version_of(table.name)
        return _report(
            table, column, cutoff, doomed, attempts=number, dry_run=dry_run, version=version
        )

    report = (retry or TTL_RETRY).run(attempt, retry_if=_plan_again)
    log.info("partition_ttl", **{k: v for k, v in report.to_json().items() if k != "partitions"})
    return report


def _plan_again(error: Exception) -> bool:
    return isinstance(error, CommitConflict) and error.kind is not ConflictKind.BUSY


def _drop(partition: PartitionScan) -> PartitionCommit:
    return PartitionCommit(
        partition_desc=partition.partition_desc,
        ops=tuple(FileOp(action=FileAction.DELETE, file=f) for f in partition.files),
    )


def _report(
    table: Table,
    column: str,
    cutoff: dt.datetime,
    doomed: list[PartitionScan],
    *,
    attempts: int,
    dry_run: bool,
    version: int | None = None,
) -> TtlReport:
    return TtlReport(
        table=table.name,
        column=column,
        cutoff=cutoff.isoformat(),
        partitions_dropped=len(doomed),
        files_dropped=sum(len(p.files) for p in doomed),
        rows_dropped=sum(p.row_count for p in doomed),
        version=version,
        attempts=attempts,
        dry_run=dry_run,
        partitions=tuple(p.partition_desc for p in doomed),
    )
