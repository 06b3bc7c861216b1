"""deltalake (delta-rs): a commit-only ``create_write_transaction`` with one ``AddAction``.

Delta has no PostgreSQL catalog: its transaction log lives next to the data on the local
filesystem, and concurrent writers are serialised by delta-rs' atomic put-if-absent of the next
``_delta_log/NNN.json`` (it retries a lost race internally, up to ``max_commit_retries``). The
handle is brought up to date with ``update_incremental()`` before each commit: a stale handle
makes delta-rs check conflicts against every commit since it was loaded, which measured ~3x
slower. Default table settings, so a checkpoint is written every 100 commits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from deltalake import DeltaTable
from deltalake.transaction import AddAction
from harness import Env, Verification
from workload import (
    DAY,
    PARTITION_DIR,
    TABLE_SCHEMA,
    FileFacts,
    commit_id_of,
    file_name,
    write_files,
)


@dataclass(frozen=True)
class DeltaContext:
    path: str
    facts: FileFacts


def _stats_json(facts: FileFacts) -> str:
    """Delta's per-file statistics, as ``write_deltalake`` would have recorded them."""
    return json.dumps(
        {
            "numRecords": facts.row_count,
            "minValues": {name: low for name, (low, _, _) in facts.stats.items()},
            "maxValues": {name: high for name, (_, high, _) in facts.stats.items()},
            "nullCount": {name: nulls for name, (_, _, nulls) in facts.stats.items()},
        }
    )


class DeltaWriter:
    def __init__(self, context: DeltaContext) -> None:
        self._table = DeltaTable(context.path)
        self._size = context.facts.size_bytes
        self._stats = _stats_json(context.facts)

    def commit(self, commit_id: int) -> None:
        self._table.update_incremental()
        action = AddAction(
            path=f"{PARTITION_DIR}/{file_name(commit_id)}",
            size=self._size,
            partition_values={"day": str(DAY)},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=self._stats,
        )
        self._table.create_write_transaction(
            [action], mode="append", schema=TABLE_SCHEMA, partition_by=["day"]
        )

    def internal_retries(self) -> None:
        return None  # delta-rs retries lost races internally and does not say how often

    def recover(self) -> None:
        self._table.update_incremental()

    def close(self) -> None:
        pass


class DeltaSystem:
    name = "deltalake"
    budgeted = True

    def version(self) -> str:
        return f"deltalake {metadata.version('deltalake')} (local filesystem log)"

    def setup(self, env: Env, tag: str, commits: int) -> DeltaContext:
        path = env.work / f"deltalake_{tag}"
        DeltaTable.create(str(path), TABLE_SCHEMA, partition_by=["day"])
        facts, _ = write_files(path / PARTITION_DIR, commits, with_partition_column=False)
        return DeltaContext(path=str(path), facts=facts)

    def open_writer(
        self, context: DeltaContext, writer_index: int, items: Sequence[int]
    ) -> DeltaWriter:
        return DeltaWriter(context)

    def verify(self, context: DeltaContext) -> Verification:
        table = DeltaTable(context.path)
        visible = [commit_id_of(uri) for uri in table.file_uris()]
        checkpoints = len(list(Path(context.path, "_delta_log").glob("*.checkpoint.parquet")))
        notes = [f"table version {table.version()}; checkpoints: {checkpoints}"]
        return Verification(visible=visible, notes=notes)


SYSTEM = DeltaSystem()
