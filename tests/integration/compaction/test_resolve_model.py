"""The CDC model test with the resolver: upserts, deletes, sequence-column replays, partial
rows, keys moving partition, CDC DML, resolves, tier folds (design D8 tiers 1 and 2: they
change no row, so the model does not move), folds and expiry interleaved; after every step
the resolved state holds (R1, R2, I1) and every retained version reads as a dict model says.

Reads go through the merge path ignoring vectors (:func:`support.merged_rows`) and, where the
table's reader must agree (no sequence column), through the table's reader too."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from catalog import (
    ROW_KIND_COLUMN,
    UNSET_COLUMN,
    Catalog,
    CommitOp,
    Table,
    VersionExpiredError,
)
from catalog.writes import changes, stage_changes
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionKind, OutcomeStatus
from tests.fixtures.compaction import plan_tasks
from tests.fixtures.resolved import assert_resolved_invariants
from tests.integration.compaction.support import reads

pytestmark = pytest.mark.integration
names = itertools.count()
RESOLVE_ONLY = CompactionPolicy(max_sorted_runs=100, max_read_amplification=100.0)
#: every file small, two make a tier-1 stretch, and any marked row wears a large file out
TIERS = CompactionPolicy(
    target_file_size=1 << 20,
    max_sorted_runs=100,
    max_read_amplification=100.0,
    tier_min_files=2,
)
MOVES = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
SEQ = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.string()), ("doc", pa.string())])

ids = st.integers(0, 7)
moves_step = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.lists(st.tuples(ids, st.sampled_from(["eu", "us"])), min_size=1, max_size=5),
    ),
    st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=3)),
    st.tuples(st.just("dml"), ids),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("tier")),
    st.tuples(st.just("fold")),
    st.tuples(st.just("expire")),
)
seqs = st.integers(0, 6)
seq_step = st.one_of(
    st.tuples(st.just("upsert"), st.lists(st.tuples(ids, seqs), min_size=1, max_size=5)),
    st.tuples(st.just("delete"), st.lists(st.tuples(ids, seqs), min_size=1, max_size=3)),
    st.tuples(st.just("partial"), st.lists(st.tuples(ids, seqs), min_size=1, max_size=3)),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("tier")),
    st.tuples(st.just("fold")),
    st.tuples(st.just("expire")),
)


def tier_folds(catalog: Catalog, table: Table) -> None:
    """Every tier task owed (a bucket owing none may be owed a resolve: not run here)."""
    for task in plan_tasks(table, TIERS, force=False):
        if task.kind is CompactionKind.FOLD_RESOLVED:
            outcome = compact(catalog, task)
            assert outcome.status is OutcomeStatus.COMMITTED, outcome.detail


def compact_kind(catalog: Catalog, table: Table, *, fold: bool) -> set[CompactionKind]:
    """Run every task owed; the kinds that ran (a bucket of one file is never folded)."""
    tasks = plan_tasks(table, None if fold else RESOLVE_ONLY, force=fold)
    for task in tasks:
        outcome = compact(catalog, task)
        assert outcome.status is OutcomeStatus.COMMITTED, outcome.detail
    return {task.kind for task in tasks}


def check(table: Table, models: dict[int, list[tuple[Any, ...]]]) -> None:
    table.refresh()
    for version, expected in models.items():
        try:
            found = reads(table, version)
        except VersionExpiredError:
            continue
        assert found == expected, f"version {version}"
        assert_resolved_invariants(table, version)


# ------------------------------------------------------------------ keys moving partition


def run_moves_step(catalog: Catalog, table: Table, model: dict[int, tuple], step: tuple) -> None:
    kind = step[0]
    if kind == "upsert":
        last = dict(step[1])  # one change per key in a batch
        table.upsert(
            pa.table(
                {
                    "id": pa.array(list(last), pa.int64()),
                    "region": list(last.values()),
                    "v": [f"u{i}" for i in last],
                },
                schema=MOVES,
            )
        )
        model.update({i: (i, r, f"u{i}") for i, r in last.items()})
    elif kind == "delete":
        present = [i for i in dict.fromkeys(step[1]) if i in model]
        if present:  # a partitioned table looks keys up: deleting none at all is no commit
            table.delete(pa.table({"id": pa.array(present, pa.int64())}))
        for i in present:
            model.pop(i)
    elif kind == "dml":
        table.update(where=[("id", "<", step[1])], set={"v": f"dml{step[1]}"})
        for i, row in model.items():
            if i < step[1]:
                model[i] = (row[0], row[1], f"dml{step[1]}")
    elif kind == "expire":
        table.expire_versions(older_than=dt.timedelta(0), retain_last=3)
    elif kind == "tier":
        tier_folds(catalog, table)
    else:
        compact_kind(catalog, table, fold=kind == "fold")


@settings(
    max_examples=8,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a DB history takes minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=st.lists(moves_step, min_size=1, max_size=8))
@example(  # tiers that fold the oldest files (tombstones dropped) and then later ones
    program=[
        ("delete", [3]),
        ("upsert", [(1, "us"), (2, "eu")]),
        ("resolve",),
        ("tier",),
        ("upsert", [(3, "eu"), (4, "us")]),
        ("dml", 3),
        ("delete", [2]),
        ("resolve",),
        ("tier",),
        ("fold",),
    ]
)
def test_keys_moving_partition_with_resolves_match_the_model(catalog: Catalog, program):
    table = catalog.create_table(
        f"model.m{next(names)}", MOVES, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    model: dict[int, tuple] = {}
    models = {table.current_version(): []}
    for step in [("upsert", [(i, "eu") for i in range(6)]), *program]:
        run_moves_step(catalog, table, model, step)
        models[table.refresh().current_version()] = sorted(model.values(), key=repr)
        check(table, models)


# ------------------------------------------------------- sequence column, replays, partials


@dataclass
class Change:
    seq: int
    delete: bool
    v: str | None = None
    doc: str | None = None
    partial: bool = False


class SeqModel:
    """Per key its changes in commit order, read as the merge kernel reads them: the highest
    sequence wins (ties: the newer change); a winning partial change takes ``doc`` from the
    closest change before it in that order that has it, a delete ending the search. A resolve
    fills the partial changes it resolves by the same rule (so reads stay), a fold keeps each
    key's winner only and drops deleted keys with their tombstones (so an older replay may
    come back after it, as in the table)."""

    def __init__(self) -> None:
        self.keys: dict[int, list[Change]] = {}

    def add(self, key: int, change: Change) -> None:
        self.keys.setdefault(key, []).append(change)

    @staticmethod
    def _ordered(changes: list[Change]) -> list[Change]:
        return sorted(changes, key=lambda c: c.seq)  # stable: ties keep commit order

    @staticmethod
    def _fill(ordered: list[Change], at: int) -> str | None:
        for before in reversed(ordered[:at]):
            if before.delete:
                return None
            if not before.partial:
                return before.doc
        return None

    def winner(self, changes: list[Change]) -> Change | None:
        ordered = self._ordered(changes)
        last = ordered[-1]
        if last.delete:
            return None
        if last.partial:
            return Change(last.seq, False, last.v, self._fill(ordered, len(ordered) - 1))
        return last

    def resolve(self) -> None:
        for history in self.keys.values():
            ordered = self._ordered(history)
            fills = {id(c): self._fill(ordered, i) for i, c in enumerate(ordered) if c.partial}
            for change in history:
                if change.partial:
                    change.doc, change.partial = fills[id(change)], False

    def fold(self) -> None:
        winners = {k: self.winner(c) for k, c in self.keys.items()}
        self.keys = {k: [w] for k, w in winners.items() if w is not None}

    def rows(self) -> list[tuple[Any, ...]]:
        live = [(k, w.seq, w.v, w.doc) for k, c in self.keys.items() if (w := self.winner(c))]
        return sorted(live, key=repr)


def seq_changes(table: Table, pairs: list[tuple[int, int]], v: str, *, partial: bool) -> None:
    """One change per key (the batch's highest sequence), as ingest's reduced run would hold."""
    last = last_per_key(pairs)
    n = len(last)
    data = pa.table(
        {
            "id": pa.array(list(last), pa.int64()),
            "seq": pa.array(list(last.values()), pa.int64()),
            "v": [f"{v}{k}.{s}" for k, s in last.items()],
            "doc": pa.nulls(n, pa.string()) if partial else [f"d{k}" for k in last],
            ROW_KIND_COLUMN: pa.array([0] * n, pa.int8()),
            UNSET_COLUMN: pa.array([["doc"] if partial else None] * n, pa.list_(pa.string())),
        }
    )
    table.refresh()
    staged = stage_changes(table.meta, changes(table.meta, data))
    table.commit(CommitOp.MERGE, staged.partitions)


def last_per_key(pairs: list[tuple[int, int]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for key, seq in pairs:
        last[key] = max(seq, last.get(key, seq))
    return last


def run_seq_step(catalog: Catalog, table: Table, model: SeqModel, step: tuple) -> None:
    kind = step[0]
    if kind in ("upsert", "partial"):
        partial = kind == "partial"
        seq_changes(table, step[1], "p" if partial else "u", partial=partial)
        for key, seq in last_per_key(step[1]).items():
            v = f"{'p' if partial else 'u'}{key}.{seq}"
            model.add(key, Change(seq, False, v, None if partial else f"d{key}", partial))
    elif kind == "delete":
        last = last_per_key(step[1])
        table.delete(
            pa.table({"id": pa.array(list(last), pa.int64()), "seq": pa.array(list(last.values()))})
        )
        for key, seq in last.items():
            model.add(key, Change(seq, True))
    elif kind == "expire":
        table.expire_versions(older_than=dt.timedelta(0), retain_last=3)
    elif kind == "tier":
        tier_folds(catalog, table)
    else:
        ran = compact_kind(catalog, table, fold=kind == "fold")
        # one bucket: the model forgets tombstones only if it was folded
        model.fold() if CompactionKind.MERGE_BUCKET in ran else model.resolve()


@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a DB history takes minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=st.lists(seq_step, min_size=1, max_size=8))
@example(  # a bucket of one run (deletes only) is not folded: its tombstones stay
    program=[
        ("delete", [(0, 6), (2, 2), (6, 3)]),
        ("fold",),
        ("upsert", [(0, 0), (3, 4), (6, 4)]),
        ("resolve",),
    ]
)
@example(  # a tier keeps the tombstone that stops the replay after it
    program=[
        ("upsert", [(1, 3), (2, 3)]),
        ("delete", [(1, 5)]),
        ("partial", [(2, 4)]),
        ("resolve",),
        ("tier",),
        ("upsert", [(1, 4), (3, 1)]),
        ("resolve",),
        ("tier",),
        ("fold",),
    ]
)
def test_replays_and_partial_rows_with_resolves_match_the_model(catalog: Catalog, program):
    table = catalog.create_table(
        f"model.s{next(names)}",
        SEQ,
        primary_key=["id"],
        hash_buckets=1,
        properties={"sequence-column": "seq"},
    )
    model = SeqModel()
    models = {table.current_version(): []}
    for step in program:
        run_seq_step(catalog, table, model, step)
        models[table.refresh().current_version()] = model.rows()
        check(table, models)
