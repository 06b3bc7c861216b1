"""``lakestream tables expire|vacuum|ttl``: run one maintenance step on one table, now.

Arguments arrive as text and are checked here, so a mistake is one line naming the flag
(exit code 2) rather than a usage box; what each step does is in :mod:`catalog.maintenance`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

from catalog import Catalog
from catalog.errors import MaintenanceConfigError
from catalog.maintenance import ExpiryReport, TtlReport, VacuumReport, parse_duration

T = TypeVar("T")


class UsageError(Exception):
    """A flag with a value that cannot work (exit code 2)."""


def duration_flag(flag: str, text: str | None) -> dt.timedelta | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def count_flag(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} takes a whole number of versions, got {text!r}") from None
    if value < 1:
        raise UsageError(f"{flag} must be at least 1: the latest version is always kept")
    return value


def expire(
    catalog: Catalog, name: str, older_than: str | None, retain_last: str | None, dry_run: bool
) -> ExpiryReport:
    window = duration_flag("--older-than", older_than)
    last = count_flag("--retain-last", retain_last)
    table = catalog.load_table(name)
    return _config(
        lambda: table.expire_versions(older_than=window, retain_last=last, dry_run=dry_run)
    )


def vacuum(catalog: Catalog, name: str, older_than: str | None, dry_run: bool) -> VacuumReport:
    window = duration_flag("--older-than", older_than)
    table = catalog.load_table(name)
    return _config(lambda: table.vacuum(older_than=window, dry_run=dry_run))


def ttl(catalog: Catalog, name: str, dry_run: bool) -> TtlReport:
    table = catalog.load_table(name)
    report = _config(lambda: table.drop_expired_partitions(dry_run=dry_run))
    if report is None:
        raise UsageError(f"{name} has no partition.ttl property; set one, e.g. partition.ttl=30d")
    return report


def _config(action: Callable[[], T]) -> T:
    try:
        return action()
    except MaintenanceConfigError as exc:
        raise UsageError(str(exc)) from exc


def expire_lines(r: ExpiryReport) -> list[str]:
    verb = "would expire" if r.dry_run else "expired"
    if r.horizon <= r.previous_horizon:
        return [
            f"{r.table}: nothing to expire (versions {r.previous_horizon}..{r.latest} are all "
            "inside the retention)"
        ]
    return [
        f"{r.table}: {verb} versions {r.previous_horizon}..{r.horizon - 1}; "
        f"oldest version kept {r.horizon}, latest {r.latest}",
        f"  partition versions {r.partition_rows_removed}, commit rows {r.commit_rows_removed}, "
        f"keys {r.keys_removed}, chains restarted {r.chains_restarted}, "
        f"empty partitions {r.partitions_removed}; files handed to cleanup {r.files_to_cleanup}",
    ]


def vacuum_lines(r: VacuumReport) -> list[str]:
    verb = "would delete" if r.dry_run else "deleted"
    lines = [
        f"{r.table}: {verb} {r.deleted} file(s), {r.bytes_deleted} bytes "
        f"({r.cleanup_due} handed to cleanup, {r.orphans} orphan(s); "
        f"older than {r.older_than_s:g}s)"
    ]
    if r.dry_run:
        lines += [f"  {path}" for path in r.paths]
    return lines


def ttl_lines(r: TtlReport) -> list[str]:
    if not r.partitions:
        return [f"{r.table}: no partition of {r.column} before {r.cutoff}"]
    verb = "would drop" if r.dry_run else "dropped"
    version = f" in version {r.version}" if r.version is not None else ""
    head = (
        f"{r.table}: {verb} {r.partitions_dropped} partition(s) of {r.column} before "
        f"{r.cutoff} ({r.files_dropped} files, {r.rows_dropped} rows){version}"
    )
    return [head, *(f"  {p}" for p in r.partitions)]


def as_json(report: ExpiryReport | VacuumReport | TtlReport) -> dict[str, Any]:
    return report.to_json()
