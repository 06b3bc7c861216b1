"""The concurrent-commit conflict matrix and how a losing commit's snapshot is rebuilt.

Pure logic, no database: given my commit's op, the ops of the commits that landed in a partition
after the version my work was planned against, and the snapshots involved, decide whether my
commit fails, is discarded, or lands - and with which snapshot.

The matrix (DESIGN.md, from LakeSoul's catalog proposal), rows = mine, columns = theirs:

============  ==========  ===========  ========  =========
mine\\theirs   append      compaction   update    merge
============  ==========  ===========  ========  =========
append        rebase      rebase       fail      fail
compaction    reorder     discard      discard   reorder
update        fail        overwrite    fail      fail
merge         fail        rebase       fail      fail
============  ==========  ===========  ========  =========

* rebase: their snapshot, then my commit (for "append after compaction" this *is* the reorder
  "compaction, then my append").
* reorder: my compaction first, then the commits that landed after my base.
* discard: my commit is a successful no-op; its output files are recorded for cleanup.
* overwrite: my update's snapshot replaces theirs.

Several commits may have landed since my base; they are folded in commit order and the strictest
outcome wins (fail > discard > anything else). Tables may opt into more than the seed's matrix
through :class:`Relaxations` (stated in table properties, never silently).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from catalog.model import CommitOp


class Resolution(StrEnum):
    REBASE = "rebase"
    REORDER = "reorder"
    DISCARD = "discard"
    OVERWRITE = "overwrite"
    FAIL = "fail"


_A, _C, _U, _M = CommitOp.APPEND, CommitOp.COMPACTION, CommitOp.UPDATE, CommitOp.MERGE
R = Resolution
MATRIX: dict[tuple[CommitOp, CommitOp], Resolution] = {
    (_A, _A): R.REBASE, (_A, _C): R.REBASE, (_A, _U): R.FAIL, (_A, _M): R.FAIL,
    (_C, _A): R.REORDER, (_C, _C): R.DISCARD, (_C, _U): R.DISCARD, (_C, _M): R.REORDER,
    (_U, _A): R.FAIL, (_U, _C): R.OVERWRITE, (_U, _U): R.FAIL, (_U, _M): R.FAIL,
    (_M, _A): R.FAIL, (_M, _C): R.REBASE, (_M, _U): R.FAIL, (_M, _M): R.FAIL,
}  # fmt: skip

#: Table property that lets concurrent merge commits rebase on each other. Only sound when the
#: merge-on-read order does not depend on commit order, i.e. the table has a sequence column.
CONCURRENT_MERGE_PROPERTY = "commit.concurrent-merge"


@dataclass(frozen=True)
class Relaxations:
    """Deviations from the seed matrix that a table declares in its properties."""

    concurrent_merge: bool = False


def resolve_pair(
    mine: CommitOp, theirs: CommitOp, relax: Relaxations = Relaxations()
) -> Resolution:
    if relax.concurrent_merge and (mine, theirs) == (_M, _M):
        return Resolution.REBASE
    return MATRIX[(mine, theirs)]


_SEVERITY = {R.FAIL: 3, R.DISCARD: 2, R.OVERWRITE: 1, R.REORDER: 1, R.REBASE: 1}


@dataclass(frozen=True)
class Landed:
    """One partition version that landed after my base: its op and what it added to the chain."""

    version: int
    op: CommitOp
    commit_ids: tuple[uuid.UUID, ...]
    """For append/merge versions: the commits they appended; for resets: the whole snapshot."""


@dataclass(frozen=True)
class Outcome:
    resolution: Resolution | None
    """``None`` when nothing landed since my base (no conflict at all)."""
    winner: Landed | None = None
    """For FAIL and DISCARD: the landed commit that decided it."""


def resolve(
    mine: CommitOp, landed: Sequence[Landed], relax: Relaxations = Relaxations()
) -> Outcome:
    """Fold the matrix over every commit that landed since my base, in commit order."""
    outcome = Outcome(None)
    for theirs in landed:
        resolution = resolve_pair(mine, theirs.op, relax)
        if outcome.resolution is None or _SEVERITY[resolution] > _SEVERITY[outcome.resolution]:
            outcome = Outcome(resolution, theirs)
    return outcome


@dataclass(frozen=True)
class Chain:
    """What a new partition version row stores: where its snapshot chain starts, and its ids.

    A reset version (compaction / update) stores its whole snapshot and starts a chain; an
    append / merge version stores only the commits it adds, so a commit costs O(1) however long
    the partition's history is. A snapshot is the ids of the chain's first row followed by the ids
    of every later row up to the version read.
    """

    starts_new_chain: bool
    commit_ids: tuple[uuid.UUID, ...]


def new_chain(
    mine: CommitOp, commit_id: uuid.UUID, outcome: Outcome, landed: Sequence[Landed]
) -> Chain:
    """The chain entry of my commit, once :func:`resolve` said it lands."""
    resolution = outcome.resolution
    if resolution in (Resolution.FAIL, Resolution.DISCARD):
        raise ValueError(f"a {resolution} outcome does not land")
    if not mine.resets_snapshot:
        # append / merge: their snapshot (whatever landed) followed by my commit
        return Chain(starts_new_chain=False, commit_ids=(commit_id,))
    if resolution is Resolution.REORDER:
        # my compaction first, then everything appended since my base, in commit order
        tail = tuple(cid for row in landed for cid in row.commit_ids)
        return Chain(starts_new_chain=True, commit_ids=(commit_id, *tail))
    # no conflict, or my update overwrites their compaction
    return Chain(starts_new_chain=True, commit_ids=(commit_id,))
