"""Vacuum: delete the files of a table that no retained version and no in-flight commit needs.

Two kinds of files go:

* files **handed to cleanup** (``cleanup_file``: expired by snapshot expiry, outputs of a
  discarded compaction) once they were handed over more than ``older_than`` ago - the grace a
  reader that planned an expired version still has to finish reading;
* **orphans**: files under the table's location that no commit row names (a writer that died
  before preparing its commit, a second write pass) and whose modification time is more than
  ``older_than`` ago. The Iceberg metadata under ``metadata/`` is not data and no orphan.

A file is never deleted while any remaining commit row adds it: the rows of retained versions
(expiry keeps exactly those) and the rows of prepared-but-unpublished commits.

**Why a commit that publishes concurrently never loses a file.** A writer writes its files
first and only then prepares the commit rows that name them. Vacuum (1) takes the time cut
``now - older_than``, (2) lists the directory, keeping only files modified before the cut, and
only then (3) reads the catalog, in one REPEATABLE READ snapshot: the commit rows (published or
prepared) and the cleanup entries. A file of a commit that prepares or publishes while vacuum
runs was written after the cut - so step 2 skipped it - unless its writer took longer than
``older_than`` between writing the file and preparing the commit. If it prepared before step 3
its rows are in the snapshot and the file is kept. So the threshold must exceed the longest
time a writer holds written files before preparing (a micro-batch's write phase; the default
1h is far above it). The steps are separate methods (:class:`Vacuum`) so a test can publish a
commit between the listing and the catalog read.

Files handed to cleanup but not yet due are never taken for orphans, although no commit row
names them any more: their grace period holds.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from catalog.logs import get_logger
from catalog.meta import TableMeta
from catalog.queries import NamedQueries
from catalog.store import PgStore, translate_errors

log = get_logger("lakestream.catalog.maintenance")
mquery = NamedQueries("catalog", "sql/maintenance.sql")
_DELETE_CHUNK = 1_000
#: The table's Iceberg metadata (catalog.iceberg): no commit row names these files, and they
#: are not orphans.
ICEBERG_METADATA_DIR = "metadata/"


@dataclass(frozen=True)
class VacuumReport:
    table: str
    older_than_s: float
    files_listed: int
    """Files under the location older than the threshold."""
    orphans: int
    """...of which no commit row names and cleanup does not hold."""
    cleanup_due: int
    """Entries handed to cleanup more than the threshold ago."""
    deleted: int
    bytes_deleted: int
    kept_referenced: int
    """Cleanup entries whose file a commit row still names (kept; the entry is dropped)."""
    dry_run: bool
    paths: tuple[str, ...] = field(default=())
    """What was (dry run: would be) deleted, relative to the table location."""

    def to_json(self, *, with_paths: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "older_than_s": self.older_than_s,
            "files_listed": self.files_listed,
            "orphans": self.orphans,
            "cleanup_due": self.cleanup_due,
            "deleted": self.deleted,
            "bytes_deleted": self.bytes_deleted,
            "kept_referenced": self.kept_referenced,
            "dry_run": self.dry_run,
        }
        if with_paths:
            out["paths"] = list(self.paths)
        return out


@dataclass(frozen=True)
class Listing:
    """Step 2: files under the location modified before the cut (relative path -> bytes)."""

    files: dict[str, int]


@dataclass(frozen=True)
class Decision:
    """Step 3: what to delete, from one catalog snapshot."""

    orphans: tuple[str, ...]
    due: tuple[str, ...]
    """Cleanup entries past their grace whose file no commit row names."""
    referenced_due: tuple[str, ...]
    """Cleanup entries whose file a commit row names again: drop the entry, keep the file."""


class Vacuum:
    """One vacuum of one table, step by step: :meth:`list_files`, :meth:`decide`, :meth:`apply`."""

    def __init__(
        self,
        store: PgStore,
        meta: TableMeta,
        *,
        older_than: dt.timedelta,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if older_than < dt.timedelta(0):
            raise ValueError("older_than must not be negative")
        self.store = store
        self.meta = meta
        self.older_than = older_than
        self.cut = clock() - older_than.total_seconds()

    def list_files(self) -> Listing:
        """Through the storage seam: a local tree or an object-store prefix alike (an object's
        modification time is its upload's completion, which is what the cut needs)."""
        found = {
            f.path: f.size
            for f in self.meta.files.list_files()
            if f.modified is not None
            and f.modified.timestamp() < self.cut
            and not f.path.startswith(ICEBERG_METADATA_DIR)
        }
        return Listing(found)

    def decide(self, listing: Listing) -> Decision:
        table_id = self.meta.table_id
        with self.store.connection() as conn, translate_errors(), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            named = {
                r["path"] for r in conn.execute(mquery("table_added_paths"), {"table_id": table_id})
            }
            now = conn.execute(mquery("db_now"), {}).fetchone()
            assert now is not None
            cleanup = conn.execute(
                mquery("cleanup_rows"),
                {"table_id": table_id, "before": now["now"] - self.older_than},
            ).fetchall()
        handed = {r["path"] for r in cleanup}
        due = {r["path"] for r in cleanup if r["due"]}
        return Decision(
            orphans=tuple(sorted(set(listing.files) - named - handed)),
            due=tuple(sorted(due - named)),
            referenced_due=tuple(sorted(due & named)),
        )

    def apply(self, listing: Listing, decision: Decision, *, dry_run: bool) -> VacuumReport:
        storage = self.meta.files
        paths = sorted({*decision.orphans, *decision.due})
        deleted, size = 0, 0
        for rel in paths:
            found = listing.files.get(rel)
            if found is None:
                found = storage.size(rel)  # a due cleanup entry newer than the listing's cut
            if found is None or (not dry_run and not storage.delete(rel)):
                continue
            deleted += 1
            size += found
        if not dry_run:
            self._forget([*decision.due, *decision.referenced_due])
        report = VacuumReport(
            table=str(self.meta.name),
            older_than_s=self.older_than.total_seconds(),
            files_listed=len(listing.files),
            orphans=len(decision.orphans),
            cleanup_due=len(decision.due) + len(decision.referenced_due),
            deleted=deleted,
            bytes_deleted=size,
            kept_referenced=len(decision.referenced_due),
            dry_run=dry_run,
            paths=tuple(paths),
        )
        log.info("vacuum", **report.to_json(with_paths=False))
        return report

    def _forget(self, paths: list[str]) -> None:
        """Drop cleanup entries once their files are gone (or are live again)."""
        for start in range(0, len(paths), _DELETE_CHUNK):
            with self.store.connection() as conn, translate_errors():
                conn.execute(
                    mquery("delete_cleanup_rows"),
                    {"table_id": self.meta.table_id, "paths": paths[start : start + _DELETE_CHUNK]},
                )

    def run(self, *, dry_run: bool) -> VacuumReport:
        listing = self.list_files()  # before the catalog is read: see the module docstring
        return self.apply(listing, self.decide(listing), dry_run=dry_run)
