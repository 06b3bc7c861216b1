"""Snapshot expiry: remove the versions below a horizon and the catalog rows only they need.

What a retained version needs, and therefore what stays:

* its ``partition_info`` rows: per partition, the version visible at the horizon (``p``) and
  every later one. A retained version's snapshot *chain* may start below ``p`` (appends and
  merges only add their own commit id); then ``p`` is **restarted**: a new commit row holding
  the partition's whole file set at ``p`` is written (with an idempotency key, so
  ``leftovers()`` sees it as published), ``p`` names only it and starts the chain, and the later
  versions of the chain start at ``p``. Reads at ``p`` and after see the same files in the same
  order (merge-on-read order included) as before.
* the ``data_commit_info`` rows those versions name. A removed version's commit row is deleted
  only when no remaining version names it (a reordered compaction names earlier commits).
* idempotency keys: a key goes only with the last of its commit's rows (in every table), never
  while a row remains - ``leftovers()`` takes a row without a key for an unpublished commit -
  and never the key of a writer's last batch (``writer_progress``), which a restarted job
  resolves when it replays that batch.

Files that a removed commit row added and no remaining row adds are handed to cleanup
(``cleanup_file``, reason ``expired``), vector files as well as data files (an entry names
both, and a restarted chain copies entries with their vectors); vacuum deletes them after its
grace period, so a reader that planned an expired version just before the expiry can still
finish.

Consistency with writers and readers:

* The horizon is recorded first, in its own transaction. A reader plans in one REPEATABLE READ
  snapshot that also reads the horizon (``Table.plan``), so a read of a version that lost rows
  always fails with :class:`VersionExpiredError` instead of seeing part of it.
* Partitions are processed in chunks, each in its own short transaction that holds the table's
  head lock, so no commit publishes into a chain while it is restarted (bounded lock time).
* A prepared-but-unpublished commit is never touched: expiry only deletes rows of commits that
  removed versions named, which are published. A commit planned below the horizon that needs
  its base snapshot (compaction, update) finds the base row gone and fails as
  ``input_files_gone`` (replan) in the committer, never lands on a wrong snapshot.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from catalog.errors import VersionExpiredError
from catalog.files.vectors import entry_paths
from catalog.logs import get_logger
from catalog.meta import TableMeta
from catalog.model import (
    CommitOp,
    CommitResult,
    FileAction,
    FileOp,
    IdempotencyKey,
    TableCommitResult,
)
from catalog.queries import NamedQueries
from catalog.queries import query as catalog_query
from catalog.snapshots import PartitionHead, load_snapshots, partition_heads
from catalog.store import PgStore, translate_errors

log = get_logger("lakestream.catalog.maintenance")
mquery = NamedQueries("catalog", "sql/maintenance.sql")

#: Writer id prefix of the keys of commit rows that expiry writes when it restarts a chain.
EXPIRY_WRITER_PREFIX = "lakestream-expiry:"
EXPIRED_REASON = "expired"
_PARTITION_CHUNK = 200
_ROW_CHUNK = 5_000


@dataclass(frozen=True)
class ExpiryReport:
    """What one expiry run did (or, dry, would do)."""

    table: str
    latest: int
    horizon: int
    """The oldest version kept after the run (every version below it is gone)."""
    previous_horizon: int
    versions_expired: int = 0
    partition_rows_removed: int = 0
    chains_restarted: int = 0
    partitions_removed: int = 0
    commit_rows_removed: int = 0
    keys_removed: int = 0
    files_to_cleanup: int = 0
    dry_run: bool = False
    horizon_committed_at: dt.datetime | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        at = self.horizon_committed_at
        out["horizon_committed_at"] = at.isoformat() if at else None
        return out


class _DryRun(Exception):
    """Raised to roll a dry run's single transaction back."""


@dataclass
class _Counts:
    partition_rows_removed: int = 0
    chains_restarted: int = 0
    partitions_removed: int = 0
    commit_rows_removed: int = 0
    keys_removed: int = 0
    files_to_cleanup: int = 0
    versions_expired: int = 0


def expire_versions(
    store: PgStore,
    meta: TableMeta,
    *,
    older_than: dt.timedelta,
    retain_last: int,
    keep: int | None = None,
    dry_run: bool = False,
) -> ExpiryReport:
    """Expire versions of ``meta``'s table older than ``older_than`` beyond the newest
    ``retain_last``; never the latest, never ``keep`` or newer. A dry run does all of it in one
    transaction and rolls it back, so its figures are exact and nothing changes."""
    from catalog.maintenance.horizon import choose_horizon

    with store.connection() as conn, translate_errors():
        run = _ExpiryRun(conn, meta, dry_run)
        try:
            with run.outer():
                state = run.state(older_than)
                horizon = choose_horizon(
                    latest=state.latest,
                    oldest=state.oldest,
                    retain_last=retain_last,
                    version_at_cut=state.version_at_cut,
                    keep=_lowest(keep, state.consumer_floor),
                )
                run.report = ExpiryReport(
                    table=str(meta.name),
                    latest=state.latest,
                    horizon=horizon,
                    previous_horizon=state.oldest,
                    dry_run=dry_run,
                )
                if horizon > state.oldest:
                    run.expire(horizon)  # may lower it: a consumer registered meanwhile
                if dry_run:
                    raise _DryRun
        except _DryRun:
            pass
    report = run.final()
    log.info("expiry", **report.to_json())
    return report


@dataclass(frozen=True)
class _State:
    latest: int
    oldest: int
    version_at_cut: int | None
    consumer_floor: int | None
    """The oldest version a live change-feed consumer needs (see :mod:`catalog.consumers`)."""


def _lowest(*versions: int | None) -> int | None:
    found = [v for v in versions if v is not None]
    return min(found) if found else None


class _ExpiryRun:
    def __init__(self, conn: psycopg.Connection[DictRow], meta: TableMeta, dry_run: bool):
        self.conn = conn
        self.meta = meta
        self.dry_run = dry_run
        self.counts = _Counts()
        self.report: ExpiryReport | None = None
        self.horizon_at: dt.datetime | None = None

    # -- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def outer(self) -> Iterator[None]:
        """A dry run is one transaction (rolled back); a real one is many small ones."""
        if self.dry_run:
            with self.conn.transaction():
                yield
        else:
            yield

    @contextlib.contextmanager
    def unit(self, *, lock: bool = True) -> Iterator[psycopg.Connection[DictRow]]:
        """One bounded unit of work; it holds the table's head lock unless told otherwise, so
        no commit publishes into what it rewrites."""
        with self.conn.transaction():
            if lock and not self.dry_run:
                self.conn.execute(catalog_query("lock_tables"), {"table_ids": [self.meta.table_id]})
            yield self.conn

    # -- the run ---------------------------------------------------------------------------

    def state(self, older_than: dt.timedelta) -> _State:
        table_id = self.meta.table_id
        head = self.conn.execute(catalog_query("table_head"), {"table_id": table_id}).fetchone()
        latest = int(head["version"]) if head else 0
        found = self.conn.execute(mquery("expiry_horizon"), {"table_id": table_id}).fetchone()
        oldest = int(found["oldest_version"]) if found else 0
        now = self.conn.execute(mquery("db_now"), {}).fetchone()
        assert now is not None
        at_cut = self.conn.execute(
            mquery("version_at_or_before"), {"table_id": table_id, "at": now["now"] - older_than}
        ).fetchone()
        return _State(
            latest,
            oldest,
            int(at_cut["version"]) if at_cut else None,
            self.consumer_floor(self.conn),
        )

    def consumer_floor(self, conn: psycopg.Connection[DictRow]) -> int | None:
        row = conn.execute(mquery("consumer_floor"), {"table_id": self.meta.table_id}).fetchone()
        return None if row is None or row["version"] is None else int(row["version"])

    def expire(self, horizon: int) -> None:
        table_id = self.meta.table_id
        row = self.conn.execute(
            mquery("version_committed_at"), {"table_id": table_id, "version": horizon}
        ).fetchone()
        assert row is not None, "the horizon is a version that exists"
        self.horizon_at = row["committed_at"]
        # first, so readers learn of it before rows go; under the head lock, which consumers
        # take to register or advance, so one registered since the state was read is seen here
        with self.unit() as conn:
            floor = self.consumer_floor(conn)
            if floor is not None and floor < horizon:
                horizon = max(floor, self.report.previous_horizon if self.report else 0)
                self._lower_horizon(horizon)
                if self.report is not None and horizon <= self.report.previous_horizon:
                    return
                row = conn.execute(
                    mquery("version_committed_at"), {"table_id": table_id, "version": horizon}
                ).fetchone()
                assert row is not None, "the horizon is a version that exists"
                self.horizon_at = row["committed_at"]
            conn.execute(
                mquery("set_expiry_horizon"),
                {"table_id": table_id, "version": horizon, "committed_at": self.horizon_at},
            )
        descs = [
            r["partition_desc"]
            for r in self.conn.execute(mquery("table_partition_descs"), {"table_id": table_id})
        ]
        for start in range(0, len(descs), _PARTITION_CHUNK):
            with self.unit() as conn:
                _PartitionExpiry(conn, self.meta, horizon, self.counts).run(
                    descs[start : start + _PARTITION_CHUNK]
                )
        self._delete_versions(horizon)
        self._sweep_keys()

    def _lower_horizon(self, horizon: int) -> None:
        if self.report is not None:
            self.report = replace(self.report, horizon=horizon)

    def _delete_versions(self, horizon: int) -> None:
        while True:
            with self.unit(lock=False) as conn:
                gone = conn.execute(
                    mquery("delete_versions_below"),
                    {"table_id": self.meta.table_id, "version": horizon, "limit": _ROW_CHUNK},
                ).fetchall()
            self.counts.versions_expired += len(gone)
            if len(gone) < _ROW_CHUNK:
                return

    def _sweep_keys(self) -> None:
        table = Jsonb([{"table_id": str(self.meta.table_id)}])
        while True:
            with self.unit(lock=False) as conn:
                gone = conn.execute(
                    mquery("sweep_commit_keys"),
                    {"before": self.horizon_at, "table": table, "limit": _ROW_CHUNK},
                ).fetchall()
            self.counts.keys_removed += len(gone)
            if len(gone) < _ROW_CHUNK:
                return

    def final(self) -> ExpiryReport:
        assert self.report is not None
        figures = asdict(self.counts)
        return ExpiryReport(
            **{**asdict(self.report), **figures, "horizon_committed_at": self.horizon_at}
        )


class _PartitionExpiry:
    """One chunk of partitions, inside one locked transaction."""

    def __init__(
        self,
        conn: psycopg.Connection[DictRow],
        meta: TableMeta,
        horizon: int,
        counts: _Counts,
    ) -> None:
        self.conn = conn
        self.meta = meta
        self.horizon = horizon
        self.counts = counts

    def run(self, descs: Sequence[str]) -> None:
        table_id = self.meta.table_id
        at_horizon = {
            d: h
            for d, h in partition_heads(self.conn, table_id, descs, self.horizon).items()
            if h is not None
        }
        if not at_horizon:
            return
        latest = partition_heads(self.conn, table_id, list(at_horizon), 2**62)
        restart = [h for h in at_horizon.values() if h.snapshot_start < h.version]
        ends = [
            h
            for d, h in at_horizon.items()
            if h.commit_op.resets_snapshot
            and h.snapshot_start == h.version
            and latest[d] is not None
            and latest[d] == h
        ]
        candidates = self._restart(restart)
        removed = self._empty(ends)
        bounds = {d: h.version + (1 if d in removed else 0) for d, h in at_horizon.items()}
        rows = self.conn.execute(
            mquery("delete_partition_rows_below"),
            {"table_id": table_id, "descs": list(bounds), "bounds": list(bounds.values())},
        ).fetchall()
        self.counts.partition_rows_removed += len(rows)
        candidates += [(r["partition_desc"], cid) for r in rows for cid in r["commit_ids"]]
        self._drop_commit_rows(candidates, list(at_horizon))
        if removed:
            self.conn.execute(
                mquery("delete_table_partitions"), {"table_id": table_id, "descs": removed}
            )
            self.counts.partitions_removed += len(removed)

    def _restart(self, heads: Sequence[PartitionHead]) -> list[tuple[str, uuid.UUID]]:
        """Make each head the start of its chain; returns the commit ids it stopped naming."""
        if not heads:
            return []
        table_id = self.meta.table_id
        old_ids = {
            r["partition_desc"]: r["commit_ids"]
            for r in self.conn.execute(
                "SELECT partition_desc, commit_ids FROM partition_info "
                "WHERE table_id = %(table_id)s AND (partition_desc, version) IN "
                "(SELECT * FROM unnest(%(descs)s::text[], %(versions)s::int[]))",
                {
                    "table_id": table_id,
                    "descs": [h.partition_desc for h in heads],
                    "versions": [h.version for h in heads],
                },
            )
        }
        now = self.conn.execute(mquery("db_now"), {}).fetchone()
        assert now is not None
        dropped: list[tuple[str, uuid.UUID]] = []
        for snapshot in load_snapshots(self.conn, table_id, heads):
            head = snapshot.head
            commit_id = uuid.uuid4()
            op = CommitOp.MERGE if snapshot.has_merge else CommitOp.APPEND
            ops = [FileOp(action=FileAction.ADD, file=f) for f in snapshot.live_files()]
            params = {"table_id": table_id, "partition_desc": head.partition_desc}
            self.conn.execute(
                mquery("insert_commit_row"),
                {
                    **params,
                    "commit_id": commit_id,
                    "commit_op": op.value,
                    "file_ops": "[" + ",".join(o.model_dump_json() for o in ops) + "]",
                },
            )
            self._record_key(commit_id, now["now"])
            self.conn.execute(
                mquery("restart_chain"),
                {**params, "version": head.version, "commit_ids": [commit_id]},
            )
            self.conn.execute(mquery("move_chain_start"), {**params, "version": head.version})
            dropped += [(head.partition_desc, cid) for cid in old_ids[head.partition_desc]]
            self.counts.chains_restarted += 1
        return dropped

    def _record_key(self, commit_id: uuid.UUID, now: dt.datetime) -> None:
        """The restarted chain's commit row is published: give it a key as commits have."""
        key = IdempotencyKey(writer_id=f"{EXPIRY_WRITER_PREFIX}{commit_id}", batch_id=0)
        result = CommitResult(
            commit_id=commit_id,
            key=key,
            committed_at=now,
            tables=(
                TableCommitResult(
                    table=str(self.meta.name), table_id=self.meta.table_id, version=None
                ),
            ),
        )
        self.conn.execute(
            catalog_query("insert_commit_key"),
            {
                "writer_id": key.writer_id,
                "batch_id": 0,
                "commit_id": commit_id,
                "committed_at": now,
                "result": Jsonb(result.model_dump(mode="json")),
            },
        )

    def _empty(self, heads: Sequence[PartitionHead]) -> list[str]:
        """Partitions whose last version (at or below the horizon) holds no file: a partition
        dropped by TTL. All their rows can go; reads see no partition, as they saw no files."""
        if not heads:
            return []
        return [
            s.partition_desc
            for s in load_snapshots(self.conn, self.meta.table_id, heads)
            if not s.live_files()
        ]

    def _drop_commit_rows(
        self, candidates: Sequence[tuple[str, uuid.UUID]], descs: Sequence[str]
    ) -> None:
        if not candidates:
            return
        table_id = self.meta.table_id
        gone = self.conn.execute(
            mquery("delete_unreferenced_commit_rows"),
            {
                "table_id": table_id,
                "descs": [d for d, _ in candidates],
                "commit_ids": [c for _, c in candidates],
            },
        ).fetchall()
        self.counts.commit_rows_removed += len(gone)
        added = {
            path
            for r in gone
            for op in r["file_ops"]
            if op["action"] == "add"
            for path in entry_paths(op["file"])
        }
        if not added:
            return
        kept = {
            r["path"]
            for r in self.conn.execute(
                mquery("added_paths"), {"table_id": table_id, "descs": list(descs)}
            )
        }
        unreferenced = sorted(added - kept)
        if unreferenced:
            self.conn.execute(
                mquery("insert_cleanup_paths"),
                {"table_id": table_id, "paths": unreferenced, "reason": EXPIRED_REASON},
            )
            self.counts.files_to_cleanup += len(unreferenced)


def check_horizon(
    conn: psycopg.Connection[DictRow], meta: TableMeta, version: int, asked: str
) -> None:
    """Raise :class:`VersionExpiredError` if ``version`` lies below the table's horizon."""
    row = conn.execute(mquery("expiry_horizon"), {"table_id": meta.table_id}).fetchone()
    if row is None or version >= row["oldest_version"]:
        return
    oldest, at = int(row["oldest_version"]), row["oldest_committed_at"]
    raise VersionExpiredError(
        f"{meta.name}: {asked} was expired; the oldest version kept is {oldest} "
        f"(committed {at.isoformat()}): read at or after it",
        table=str(meta.name),
        oldest_version=oldest,
        oldest_committed_at=at,
    )
