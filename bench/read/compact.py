"""Compaction of a whole CDC table for the read bench, with the compactor's own routine.

The bench needs the *same* table in both layouts. Compacting it in place (COMPACTION commits
on top of the merge commits, one per bucket, as ``lakestream tables compact`` makes them)
keeps both readable through time travel, so the two reads differ only in the layout of the
files, never in data, table or catalog state.
"""

from __future__ import annotations

from catalog import Table
from compaction import rewrite
from compaction.planner import plan_table
from compaction.policy import CompactionPolicy
from compaction.task import OutcomeStatus


def compact(table: Table, base_version: int) -> int:
    """Fold every bucket's runs at ``base_version`` into one key-sorted file; the new version."""
    policy = CompactionPolicy.from_properties(table.meta.properties, table=table.name)
    tasks = plan_table(table.meta, table.plan(version=base_version), policy, force=True)
    outcomes = [rewrite.compact(table.catalog, task) for task in tasks]
    lost = [o for o in outcomes if o.status is not OutcomeStatus.COMMITTED]
    if lost:
        raise RuntimeError(f"the compaction of {table.name} did not land: {lost[0].detail}")
    return max((o.version or base_version for o in outcomes), default=base_version)
