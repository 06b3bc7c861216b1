"""The conflict matrix, checked cell by cell and against an independent model of the seed."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.conflicts import (
    Chain,
    Landed,
    Relaxations,
    Resolution,
    new_chain,
    resolve,
    resolve_pair,
)
from catalog.model import CommitOp

A, C, U, M = CommitOp.APPEND, CommitOp.COMPACTION, CommitOp.UPDATE, CommitOp.MERGE

EXPECTED = {
    (A, A): "rebase", (A, C): "rebase", (A, U): "fail", (A, M): "fail",
    (C, A): "reorder", (C, C): "discard", (C, U): "discard", (C, M): "reorder",
    (U, A): "fail", (U, C): "overwrite", (U, U): "fail", (U, M): "fail",
    (M, A): "fail", (M, C): "rebase", (M, U): "fail", (M, M): "fail",
}  # fmt: skip


@pytest.mark.parametrize(("pair", "expected"), sorted(EXPECTED.items()))
def test_every_cell_of_the_matrix(pair, expected):
    assert resolve_pair(*pair) == Resolution(expected)


def test_concurrent_merge_is_only_allowed_when_the_table_says_so():
    assert resolve_pair(M, M) is Resolution.FAIL
    assert resolve_pair(M, M, Relaxations(concurrent_merge=True)) is Resolution.REBASE
    assert resolve_pair(A, M, Relaxations(concurrent_merge=True)) is Resolution.FAIL


# --- model: the seed's resolution steps, written independently of catalog.conflicts --------


def model_commit(snapshot: list, op: CommitOp, cid) -> list:
    """Snapshot after a commit that saw no concurrent commit."""
    return [cid] if op in (C, U) else [*snapshot, cid]


def model_resolve(base: list, current: list, theirs: list, mine: CommitOp, cid):
    """Return ('fail'|'discard'|'land', snapshot) per the seed's conflict-resolving steps."""
    ops = set(theirs)
    if mine is A:
        if ops & {U, M}:
            return "fail", current
        return "land", [*current, cid]
    if mine is C:
        if ops & {U, C}:
            return "discard", current
        return "land", [cid, *current[len(base) :]]
    if mine is U:
        if ops & {A, M, U}:
            return "fail", current
        return "land", [cid]
    if ops & {A, M, U}:
        return "fail", current
    return "land", [*current, cid]


class ChainLog:
    """Partition versions stored as catalog.conflicts chains; snapshots rebuilt from them."""

    def __init__(self, initial: list):
        self.rows = [(1, tuple(initial))]  # (snapshot_start, commit_ids) per version

    def snapshot(self, version: int) -> list:
        start = self.rows[version - 1][0]
        return [cid for _, ids in self.rows[start - 1 : version] for cid in ids]

    def append(self, chain: Chain) -> None:
        version = len(self.rows) + 1
        start = version if chain.starts_new_chain else self.rows[-1][0]
        self.rows.append((start, chain.commit_ids))

    def landed_since(self, base: int, ops: list) -> list[Landed]:
        return [
            Landed(v, ops[v - base - 1], self.rows[v - 1][1])
            for v in range(base + 1, len(self.rows) + 1)
        ]


ops_strategy = st.sampled_from([A, C, U, M])


@given(mine=ops_strategy, theirs=st.lists(ops_strategy, max_size=4), initial=st.integers(0, 3))
def test_resolution_matches_the_seed_model(mine, theirs, initial):
    ids = [uuid.uuid4() for _ in range(initial)]
    log = ChainLog(ids)
    for op in theirs:  # each of theirs committed with no conflict, one after the other
        log.append(new_chain(op, uuid.uuid4(), resolve(op, []), []))
    base_snapshot = log.snapshot(1)
    current = log.snapshot(len(log.rows))
    landed = log.landed_since(1, theirs)
    mine_id = uuid.uuid4()

    outcome = resolve(mine, landed)
    expected, expected_snapshot = model_resolve(base_snapshot, current, theirs, mine, mine_id)

    if expected == "fail":
        assert outcome.resolution is Resolution.FAIL
        assert outcome.winner is not None and outcome.winner.op in theirs
    elif expected == "discard":
        assert outcome.resolution is Resolution.DISCARD
    else:
        assert outcome.resolution not in (Resolution.FAIL, Resolution.DISCARD)
        log.append(new_chain(mine, mine_id, outcome, landed))
        assert log.snapshot(len(log.rows)) == expected_snapshot


def test_no_concurrent_commit_means_no_conflict():
    assert resolve(U, []).resolution is None
    chain = new_chain(U, uuid.uuid4(), resolve(U, []), [])
    assert chain.starts_new_chain


def test_failed_outcome_names_the_first_winning_commit():
    winner = Landed(5, U, (uuid.uuid4(),))
    outcome = resolve(A, [Landed(4, A, (uuid.uuid4(),)), winner])
    assert outcome.resolution is Resolution.FAIL and outcome.winner == winner
