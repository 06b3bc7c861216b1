"""The planner's rules, one test each, and a hypothesis test against a small model of them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import ROW_KIND_COLUMN, ROW_KIND_DELETE, ColumnStats, DataFile, VectorRef
from catalog.manifest import FileManifest
from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec
from catalog.planning import PartitionScan, ScanPlan, resolved_prefix
from compaction.planner import (
    bins_of,
    only_deletes,
    pack_bins,
    plan_table,
    read_amplification,
    size_tiers,
)
from compaction.policy import CompactionPolicy
from compaction.task import CompactionKind

MB = 1 << 20
POLICY = CompactionPolicy(target_file_size=100 * MB)  # small: < 70 MB; bins close at 200 MB
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.float64())])


def meta(*, cdc: bool, properties: dict[str, str] | None = None) -> TableMeta:
    return TableMeta(
        table_id=uuid.UUID(int=7),
        name=TableName("shop", "orders"),
        location="/nowhere",
        spec=PartitionSpec(("day",), 2 if cdc else -1),
        primary_key=("id",) if cdc else (),
        properties=properties or {},
        schemas={0: SCHEMA},
        current_schema_id=0,
    )


def file(name: str, size_mb: float = 1, rows: int = 10, keys: tuple[int, int] | None = None):
    stats = {"id": ColumnStats(min=keys[0], max=keys[1])} if keys else {}
    return DataFile(
        path=f"{name}.parquet", size_bytes=int(size_mb * MB), row_count=rows, stats=stats
    )


def partition(desc: str, *files: DataFile, cdc: bool = False) -> PartitionScan:
    """As plan_scan builds it: a CDC bucket's resolved prefix counted from its files' flags."""
    resolved = resolved_prefix(FileManifest.of(files)) if cdc else 0
    return PartitionScan(
        desc,
        3,
        tuple(files),
        merge=cdc,
        values={},
        bucket=0 if cdc else None,
        resolved_count=resolved,
    )


def plan(table: TableMeta, *parts: PartitionScan, version: int = 9) -> ScanPlan:
    return ScanPlan(table, version, parts)


def names(files) -> list[str]:
    return [f.path.removesuffix(".parquet") for f in files]


APPEND = meta(cdc=False)
CDC = meta(cdc=True)


# ------------------------------------------------------------------------------ append rules


def test_five_small_files_make_one_task_in_commit_order():
    files = [file(f"f{i}", size_mb=10) for i in range(5)]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["f0", "f1", "f2", "f3", "f4"]
    assert task.kind is CompactionKind.BIN_PACK
    assert (task.table, task.table_id, task.partition_desc) == (
        "shop.orders",
        APPEND.table_id,
        "day=1",
    )
    assert task.base_version == 9 and task.target_file_size == 100 * MB
    assert not task.drop_deletes


def test_large_files_are_never_inputs():
    files = [file("big0", 90), *(file(f"s{i}", 5) for i in range(5)), file("big1", 70)]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["s0", "s1", "s2", "s3", "s4"]  # 70 MB is not below 70 MB


def test_too_few_small_files_wait():
    files = [file(f"f{i}") for i in range(4)]
    assert plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY) == []


def test_a_partition_idle_long_enough_is_compacted_anyway():
    files = [file(f"f{i}") for i in range(2)]
    table_plan = plan(APPEND, partition("day=1", *files), partition("day=2", *files))
    tasks = plan_table(APPEND, table_plan, POLICY, idle_rounds={"day=1": 10, "day=2": 9})
    assert [t.partition_desc for t in tasks] == ["day=1"]


def test_force_lifts_the_wait_but_one_small_file_is_no_task():
    table_plan = plan(
        APPEND,
        partition("day=1", file("a"), file("b")),
        partition("day=2", file("c"), file("big", 99)),
    )
    tasks = plan_table(APPEND, table_plan, POLICY, force=True)
    assert [(t.partition_desc, names(t.inputs)) for t in tasks] == [("day=1", ["a", "b"])]


def test_bins_close_at_twice_the_target_and_keep_commit_order():
    sizes = [60, 60, 60, 30, 50, 50, 50, 60, 10]  # MB, all small
    files = [file(f"f{i}", s) for i, s in enumerate(sizes)]
    bins = pack_bins(files, 100 * MB)
    assert [names(b) for b in bins] == [["f0", "f1", "f2", "f3"], ["f4", "f5", "f6", "f7"]]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == [f"f{i}" for i in range(8)]  # f8 alone in its bin stays


def test_a_bin_of_one_file_is_no_task():
    assert pack_bins([file("only", 60)], 100 * MB) == []


def test_one_task_per_partition_and_none_for_quiet_ones():
    many = [file(f"f{i}", 60) for i in range(20)]  # several bins
    table_plan = plan(APPEND, partition("day=1", *many), partition("day=2", file("x")))
    tasks = plan_table(APPEND, table_plan, POLICY)
    assert [t.partition_desc for t in tasks] == ["day=1"]
    assert len(tasks[0].inputs) == 20


def test_a_disabled_table_gets_no_task_even_when_forced():
    files = [file(f"f{i}") for i in range(9)]
    off = CompactionPolicy(enabled=False)
    assert plan_table(APPEND, plan(APPEND, partition("day=1", *files)), off, force=True) == []


# ------------------------------------------- append files worn by deletion vectors (tier 2)


def marked(name: str, size_mb: float, rows: int, deleted: int) -> DataFile:
    """A file whose deletion vector marks ``deleted`` of its ``rows``."""
    vector = VectorRef(cardinality=deleted, inline="AAAA")
    return file(name, size_mb, rows).model_copy(update={"vector": vector})


def test_a_large_file_past_the_deleted_ratio_is_rewritten_alone():
    files = [marked("worn", 90, rows=100, deleted=21), file("big", 90)]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["worn"]
    assert task.kind is CompactionKind.BIN_PACK


def test_a_file_at_or_below_the_ratio_is_left_alone_unless_small():
    files = [marked("at", 90, rows=100, deleted=20), marked("few", 90, rows=100, deleted=3)]
    assert plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY) == []
    small = [marked("s0", 5, rows=100, deleted=3), *(file(f"s{i}", 5) for i in range(1, 5))]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *small)), POLICY)
    assert names(task.inputs) == ["s0", "s1", "s2", "s3", "s4"]  # small anyway: packed


def test_a_worn_file_is_binned_with_its_small_neighbours_in_commit_order():
    files = [file("s0", 10), marked("worn", 90, rows=10, deleted=5), file("s1", 10)]
    files += [file(f"s{i}", 10) for i in range(2, 5)]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["s0", "worn", "s1", "s2", "s3", "s4"]


def test_a_worn_file_does_not_make_too_few_small_files_due():
    files = [file("s0", 10), file("s1", 10), file("big", 90), marked("worn", 150, 10, 9)]
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["worn"]  # the two small files still wait for three more


def test_the_ratio_is_a_table_property():
    files = [marked("half", 90, rows=100, deleted=50)]
    lenient = CompactionPolicy(target_file_size=100 * MB, rewrite_deleted_ratio=0.6)
    assert plan_table(APPEND, plan(APPEND, partition("day=1", *files)), lenient) == []
    [task] = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY)
    assert names(task.inputs) == ["half"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 250), st.integers(0, 10)), min_size=1, max_size=12))
def test_the_rewrite_finds_the_planned_bins_again(specs: list[tuple[int, int]]):
    """The rewrite re-bins a task's inputs with ``bins_of``: each planned bin, worn files in it
    or not, must come back unchanged, and every worn file must be an input."""
    files = [
        marked(f"f{i}", size, rows=10, deleted=dead) if dead else file(f"f{i}", size)
        for i, (size, dead) in enumerate(specs)
    ]
    tasks = plan_table(APPEND, plan(APPEND, partition("day=1", *files)), POLICY, force=True)
    inputs = tasks[0].inputs if tasks else ()
    worn = {f.path for f in files if f.vector is not None and f.vector.cardinality > 2}
    assert worn <= {f.path for f in inputs}
    if inputs:
        bins = bins_of(inputs, POLICY.target_file_size)
        assert all(len(b) > 1 or b[0].path in worn for b in bins)
        order = [f.path for f in files]
        assert [order.index(f.path) for f in inputs] == sorted(order.index(f.path) for f in inputs)


# ------------------------------------------------------------------------------- CDC rules


def test_a_bucket_with_max_sorted_runs_is_merged_whole():
    runs = [file(f"r{i}", keys=(0, 100)) for i in range(5)]
    [task] = plan_table(CDC, plan(CDC, partition("day=1,bucket=0000", *runs, cdc=True)), POLICY)
    assert names(task.inputs) == ["r0", "r1", "r2", "r3", "r4"]
    assert task.kind is CompactionKind.MERGE_BUCKET and task.drop_deletes


def test_fewer_runs_wait_while_reads_stay_cheap():
    base = file("base", rows=1000, keys=(0, 999))
    runs = [base, file("u1", rows=100, keys=(0, 999)), file("u2", rows=100, keys=(0, 999))]
    assert read_amplification(CDC, runs) == 1.2
    [task] = plan_table(CDC, plan(CDC, partition("b", *runs, cdc=True)), POLICY)
    assert task.kind is CompactionKind.RESOLVE  # no fold: the runs are resolved instead
    assert names(task.inputs) == ["base", "u1", "u2"] and not task.drop_deletes
    no_resolve = CompactionPolicy(target_file_size=100 * MB, resolve=False)
    assert plan_table(CDC, plan(CDC, partition("b", *runs, cdc=True)), no_resolve) == []


def test_read_amplification_past_the_limit_merges():
    runs = [file("base", rows=100, keys=(0, 99)), file("u1", rows=60, keys=(10, 500))]
    assert read_amplification(CDC, runs) == 1.6
    [task] = plan_table(CDC, plan(CDC, partition("b", *runs, cdc=True)), POLICY)
    assert names(task.inputs) == ["base", "u1"]


def test_runs_of_disjoint_key_ranges_hold_distinct_keys():
    runs = [file(f"r{i}", rows=100, keys=(i * 100, i * 100 + 99)) for i in range(4)]
    assert read_amplification(CDC, runs) == 1.0
    [task] = plan_table(CDC, plan(CDC, partition("b", *runs, cdc=True)), POLICY)
    assert task.kind is CompactionKind.RESOLVE


def test_a_run_without_key_stats_may_overlap_any():
    runs = [
        file("a", rows=100, keys=(0, 9)),
        file("b", rows=100, keys=(50, 59)),
        file("c", rows=50),
    ]
    assert read_amplification(CDC, runs) == 2.5


def test_a_bucket_of_one_file_is_never_folded_only_resolved_when_merge_read():
    plain = partition("b", file("base", rows=10, keys=(0, 9)), cdc=False)
    assert plan_table(CDC, plan(CDC, plain), POLICY, force=True) == []
    one_run = partition("b", file("base", rows=10, keys=(0, 9)), cdc=True)
    [task] = plan_table(CDC, plan(CDC, one_run), POLICY, force=True)
    assert task.kind is CompactionKind.RESOLVE


def resolved(f: DataFile) -> DataFile:
    return f.model_copy(update={"resolved": True})


def test_a_bucket_whose_files_are_all_resolved_is_no_task():
    files = [resolved(file("base", rows=1000, keys=(0, 999))), resolved(file("u1", keys=(0, 9)))]
    assert plan_table(CDC, plan(CDC, partition("b", *files, cdc=True)), POLICY) == []


def test_only_files_after_the_resolved_prefix_are_pending():
    files = [resolved(file("a", rows=1000, keys=(0, 999))), file("b"), resolved(file("c"))]
    [task] = plan_table(CDC, plan(CDC, partition("b", *files, cdc=True)), POLICY)
    assert task.kind is CompactionKind.RESOLVE and names(task.inputs) == ["a", "b", "c"]


def test_force_merges_every_bucket_with_more_than_one_file():
    two = partition("b", file("a", keys=(0, 9)), file("b", keys=(100, 109)), cdc=True)
    [task] = plan_table(CDC, plan(CDC, two), POLICY, force=True)
    assert names(task.inputs) == ["a", "b"]


# ------------------------------------------------------------------- the model, hypothesis


@dataclass(frozen=True)
class Case:
    cdc: bool
    partitions: dict[str, list[DataFile]]
    idle: dict[str, int]
    force: bool
    policy: CompactionPolicy


def model_bins(sizes: list[int], target: int) -> list[list[int]]:
    """Indices of bins: the shortest prefix reaching 2 x target, again and again."""
    bins, rest = [], list(range(len(sizes)))
    while rest:
        cut = next(
            (n for n in range(1, len(rest) + 1) if sum(sizes[i] for i in rest[:n]) >= 2 * target),
            len(rest),
        )
        bins.append(rest[:cut])
        rest = rest[cut:]
    return [b for b in bins if len(b) >= 2]


def model_append(files: list[DataFile], idle: int, force: bool, p: CompactionPolicy) -> list[str]:
    small = [f for f in files if f.size_bytes < p.target_file_size * p.small_file_ratio]
    ready = force or len(small) >= p.min_file_num or idle >= p.force_after_rounds
    if len(small) < 2 or not ready:
        return []
    bins = model_bins([f.size_bytes for f in small], p.target_file_size)
    return [small[i].path for b in bins for i in b]


def model_live(runs: list[DataFile]) -> int:
    """Union-find over pairwise overlapping key ranges; the largest run of each group."""
    group = list(range(len(runs)))

    def find(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    for i, a in enumerate(runs):
        for j, b in enumerate(runs):
            sa, sb = a.stats["id"], b.stats["id"]
            if sa.min <= sb.max and sb.min <= sa.max:
                group[find(i)] = find(j)
    largest: dict[int, int] = {}
    for i, run in enumerate(runs):
        largest[find(i)] = max(largest.get(find(i), 0), run.row_count)
    return sum(largest.values())


def model_cdc(runs: list[DataFile], force: bool, p: CompactionPolicy) -> list[str]:
    if len(runs) < 2:
        return []
    rows = sum(r.row_count for r in runs)
    live = model_live(runs)
    amplification = rows / live if live else 1.0
    due = force or len(runs) >= p.max_sorted_runs or amplification > p.max_read_amplification
    return [r.path for r in runs] if due else []


def model_kind(runs: list[DataFile], force: bool, p: CompactionPolicy) -> CompactionKind | None:
    """A fold when due, else a resolve of the bucket (its runs are all pending: none is flagged
    resolved in these cases, and a bucket planned for a merge read has one or more runs)."""
    if model_cdc(runs, force, p):
        return CompactionKind.MERGE_BUCKET
    return CompactionKind.RESOLVE if runs and p.resolve else None


@st.composite
def cases(draw) -> Case:
    cdc = draw(st.booleans())
    policy = CompactionPolicy(
        target_file_size=draw(st.integers(50, 200)),
        small_file_ratio=draw(st.sampled_from([0.3, 0.7, 1.0])),
        min_file_num=draw(st.integers(1, 6)),
        force_after_rounds=draw(st.integers(1, 4)),
        max_sorted_runs=draw(st.integers(1, 6)),
        max_read_amplification=draw(st.sampled_from([1.0, 1.5, 3.0])),
        resolve=draw(st.booleans()),
    )
    partitions = {}
    for p in range(draw(st.integers(0, 4))):
        files = []
        for i in range(draw(st.integers(0, 9))):
            low = draw(st.integers(0, 50))
            files.append(
                DataFile(
                    path=f"p{p}-f{i}.parquet",
                    size_bytes=draw(st.integers(0, 250)),
                    row_count=draw(st.integers(0, 40)),
                    stats={"id": ColumnStats(min=low, max=low + draw(st.integers(0, 20)))},
                )
            )
        partitions[f"day={p}"] = files
    idle = {desc: draw(st.integers(0, 5)) for desc in partitions}
    return Case(cdc, partitions, idle, draw(st.booleans()), policy)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_planner_matches_the_model(case: Case):
    table = meta(cdc=case.cdc)
    parts = [partition(d, *fs, cdc=case.cdc) for d, fs in case.partitions.items() if fs]
    tasks = plan_table(
        table, plan(table, *parts), case.policy, idle_rounds=case.idle, force=case.force
    )
    got = {t.partition_desc: (t.kind, [f.path for f in t.inputs]) for t in tasks}
    assert len(got) == len(tasks), "at most one task per partition"
    expected = {}
    for desc, files in case.partitions.items():
        if case.cdc:
            kind = model_kind(files, case.force, case.policy)
            if kind is not None:
                expected[desc] = (kind, [f.path for f in files])
        else:
            inputs = model_append(files, case.idle[desc], case.force, case.policy)
            if inputs:
                expected[desc] = (CompactionKind.BIN_PACK, inputs)
    assert got == expected
    for task in tasks:
        resolve = task.kind is CompactionKind.RESOLVE
        assert (resolve or len(task.inputs) >= 2) and task.base_version == 9
        assert task.drop_deletes is (case.cdc and not resolve)
        order = [f.path for f in case.partitions[task.partition_desc]]
        positions = [order.index(f.path) for f in task.inputs]
        assert positions == sorted(positions), "inputs keep commit order"


# ------------------------------------------- resolved buckets: what a reader pays, and tiers


def resolved_marked(f: DataFile, n: int) -> DataFile:
    vector = VectorRef(cardinality=n, path="v.puffin", offset=0, length=8)
    return f.model_copy(update={"resolved": True, "vector": vector})


NO_RESOLVE = CompactionPolicy(target_file_size=100 * MB, resolve=False)
#: Room for ten files a bucket: the tier tests below are about tiers, not the crowded rule.
ROOMY = CompactionPolicy(target_file_size=100 * MB, max_sorted_runs=10)
SEQ = meta(cdc=True, properties={"sequence-column": "v"})


def kinds(table: TableMeta, policy: CompactionPolicy, *files: DataFile) -> list:
    tasks = plan_table(table, plan(table, partition("b", *files, cdc=True)), policy)
    return [(t.kind, names(t.inputs), t.drop_deletes) for t in tasks]


def test_resolved_files_do_not_count_as_sorted_runs():
    # seven resolved files (big: no tier applies) and two pending runs: nine files, past
    # max_sorted_runs (crowded) but short of the cap of twice it, and no two small resolved files
    prefix = [resolved(file(f"r{i}", 80, rows=100, keys=(i * 100, i * 100 + 99))) for i in range(7)]
    pending = [file("p0", rows=10, keys=(0, 9)), file("p1", rows=10, keys=(10, 19))]
    [(kind, _, _)] = kinds(CDC, POLICY, *prefix, *pending)
    assert kind is CompactionKind.RESOLVE
    [(kind, inputs, _)] = kinds(CDC, NO_RESOLVE, *prefix, *pending)
    assert kind is CompactionKind.MERGE_BUCKET and len(inputs) == 9  # today's rule, kept


def test_pending_runs_reaching_max_sorted_runs_still_fold_the_bucket():
    prefix = [resolved(file("base", 80, rows=1000, keys=(0, 999)))]
    pending = [file(f"p{i}", rows=1, keys=(i, i)) for i in range(POLICY.max_sorted_runs)]
    [(kind, inputs, drop)] = kinds(CDC, POLICY, *prefix, *pending)
    assert kind is CompactionKind.MERGE_BUCKET and len(inputs) == 6 and drop


def test_read_cost_counts_the_prefix_live_rows_as_one_base_plus_the_pending_runs():
    # resolved files overlapping in key range: the estimate would take them for updates of
    # each other (3.2x); a reader pays their live rows once, plus the pending run (nine files:
    # short of the cap of 2 x max_sorted_runs)
    prefix = [resolved_marked(file(f"r{i}", 80, rows=100, keys=(0, 999)), 10) for i in range(8)]
    pending = [file("p", rows=360, keys=(0, 999))]
    assert read_amplification(CDC, [*prefix, *pending]) > 3
    assert [k for k, _, _ in kinds(CDC, NO_RESOLVE, *prefix, *pending)] == [
        CompactionKind.MERGE_BUCKET
    ]
    # live: 8 x 90 rows; pending 360 -> 1080 / 720 = 1.5, not past the limit
    [(kind, _, _)] = kinds(CDC, POLICY, *prefix, *pending)
    assert kind is CompactionKind.RESOLVE
    [(kind, _, _)] = kinds(CDC, POLICY, *prefix, file("p", rows=361, keys=(0, 999)))
    assert kind is CompactionKind.MERGE_BUCKET


def test_tier_one_folds_consecutive_small_resolved_files():
    big = resolved(file("big", 80, rows=1000, keys=(0, 999)))
    small = [resolved(file(f"s{i}", 5, keys=(i, i))) for i in range(4)]
    assert kinds(CDC, POLICY, big, *small) == [
        (CompactionKind.FOLD_RESOLVED, ["s0", "s1", "s2", "s3"], False)
    ]
    assert kinds(CDC, POLICY, big, *small[:3]) == []  # too few: nothing owed
    broken = [*small[:2], resolved(file("mid", 80, keys=(50, 60))), *small[2:]]
    assert kinds(CDC, ROOMY, big, *broken) == []  # not consecutive (six files: not crowded)
    six = CompactionPolicy(target_file_size=100 * MB, tier_min_files=6, max_sorted_runs=6)
    assert kinds(CDC, six, big, *small) == []


def test_tier_one_groups_are_cut_at_twice_the_target_and_stay_in_the_prefix():
    small = [resolved(file(f"s{i}", 60, keys=(i, i))) for i in range(8)]  # groups of 4 x 60 MB
    assert kinds(CDC, POLICY, *small, file("p", keys=(0, 9))) == [
        (CompactionKind.FOLD_RESOLVED, ["s4", "s5", "s6", "s7"], False)  # before a resolve
    ]
    pending_small = [file(f"q{i}", 5, keys=(i, i)) for i in range(4)]
    assert [k for k, _, _ in kinds(CDC, POLICY, *small[:1], *pending_small)] == [
        CompactionKind.RESOLVE
    ]


def test_tombstones_are_dropped_only_from_the_oldest_files_without_a_sequence_column():
    small = [resolved(file(f"s{i}", 5, keys=(i, i))) for i in range(4)]
    assert kinds(CDC, POLICY, *small)[0][2] is True
    assert kinds(SEQ, POLICY, *small)[0][2] is False
    big = resolved(file("big", 80, keys=(0, 9)))
    assert kinds(CDC, POLICY, big, *small)[0][2] is False


def test_tier_two_rewrites_one_worn_resolved_file():
    worn = resolved_marked(file("worn", 80, rows=100, keys=(0, 99)), 21)
    fine = resolved_marked(file("fine", 80, rows=100, keys=(0, 99)), 20)
    assert kinds(CDC, POLICY, fine, worn, file("p", keys=(0, 9))) == [
        (CompactionKind.FOLD_RESOLVED, ["worn"], False)
    ]
    assert kinds(CDC, POLICY, fine) == []
    tolerant = CompactionPolicy(target_file_size=100 * MB, rewrite_deleted_ratio=0.5)
    assert kinds(CDC, tolerant, fine, worn) == []
    small_worn = resolved_marked(file("sw", 5, rows=100, keys=(0, 99)), 90)
    assert kinds(CDC, POLICY, fine, small_worn) == []  # tier 1's, once enough small files


def test_tiers_wait_for_compaction_resolve():
    small = [resolved(file(f"s{i}", 5, keys=(i * 10, i * 10))) for i in range(4)]
    assert kinds(CDC, NO_RESOLVE, *small) == []


def deletes_only(f: DataFile, n: int) -> DataFile:
    kinds = ColumnStats(min=ROW_KIND_DELETE, max=ROW_KIND_DELETE)
    return resolved_marked(f, n).model_copy(update={"stats": {**f.stats, ROW_KIND_COLUMN: kinds}})


def test_tier_two_leaves_a_file_of_tombstones_alone_unless_they_may_go():
    live = resolved(file("live", 80, rows=100, keys=(0, 99)))
    tombstones = deletes_only(file("tomb", 80, rows=100, keys=(0, 99)), 100)
    assert only_deletes(tombstones) and not only_deletes(live)
    assert kinds(CDC, POLICY, live, tombstones) == []  # a rewrite would keep every row
    assert kinds(SEQ, POLICY, tombstones, live) == []  # the oldest, but a sequence column
    assert kinds(CDC, POLICY, tombstones, live) == [  # the oldest: they may go
        (CompactionKind.FOLD_RESOLVED, ["tomb"], True)
    ]


def test_tier_one_rewrites_a_larger_file_only_once_the_younger_ones_caught_up():
    older = resolved(file("older", 50, keys=(0, 999)))
    young = [resolved(file(f"y{i}", 5, keys=(i, i))) for i in range(6)]
    # 50 MB > 1.5 x 30 MB: the six young files fold alone
    assert kinds(CDC, POLICY, older, *young) == [
        (CompactionKind.FOLD_RESOLVED, [f"y{i}" for i in range(6)], False)
    ]
    eight = [resolved(file(f"y{i}", 5, keys=(i, i))) for i in range(6)] + [
        resolved(file(f"z{i}", 5, keys=(i, i))) for i in range(2)
    ]
    # 50 MB <= 1.5 x 40 MB: it joins them
    assert kinds(CDC, POLICY, older, *eight)[0][1] == ["older", *names(eight)]


def test_size_tiers_cut_from_the_newest_back():
    sizes = [64, 8, 8, 4, 2, 1, 1]
    files = [file(f"f{i}", size) for i, size in enumerate(sizes)]
    assert [names(g) for g in size_tiers(files, 100 * MB)] == [
        ["f1", "f2", "f3", "f4", "f5", "f6"],  # 8 <= 1.5 x 16, then 64 > 1.5 x 24
        ["f0"],
    ]


# ------------------------------------------------- the bound on a resolved bucket's file count


def test_a_crowded_bucket_folds_its_newest_small_resolved_files_whatever_their_tiers():
    # five files (max_sorted_runs): 40 MB > 1.5 x 5 MB splits the small ones into groups of
    # one and two, short of tier_min_files; crowded, the newest stretch folds anyway
    files = [
        resolved(file("big", 80, keys=(0, 999))),
        resolved(file("s0", 5, keys=(0, 0))),
        resolved(file("mid", 40, keys=(1, 1))),
        resolved(file("s1", 5, keys=(2, 2))),
        resolved(file("s2", 5, keys=(3, 3))),
    ]
    assert kinds(CDC, ROOMY, *files) == []  # room left: the tiers' write amplification rules
    assert kinds(CDC, POLICY, *files) == [
        (CompactionKind.FOLD_RESOLVED, ["s0", "mid", "s1", "s2"], False)
    ]


def test_a_crowded_bucket_with_no_three_small_files_resolves_then_folds_whole():
    big = [resolved(file(f"r{i}", 80, keys=(i, i))) for i in range(3)]
    two = [resolved(file(f"s{i}", 5, keys=(i, i))) for i in range(2)]
    assert [k for k, _, _ in kinds(CDC, POLICY, *big, two[0], file("p", 5, keys=(9, 9)))] == [
        CompactionKind.RESOLVE  # pending first: resolving it may make a tier due
    ]
    # two small files only: a tier could write two files again (live rows, tombstones)
    [(kind, inputs, drop)] = kinds(CDC, POLICY, *big, *two)
    assert kind is CompactionKind.MERGE_BUCKET and len(inputs) == 5 and drop
    assert kinds(CDC, POLICY, *big, two[0]) == []  # four files: below max_sorted_runs


def test_twice_max_sorted_runs_files_fold_the_bucket_whatever_else_is_due():
    files = [resolved(file(f"r{i}", 80, keys=(i, i))) for i in range(9)]
    pending = file("p", 1, keys=(0, 0))
    assert [k for k, _, _ in kinds(CDC, POLICY, *files[:8], pending)] == [CompactionKind.RESOLVE]
    [(kind, inputs, _)] = kinds(CDC, POLICY, *files, pending)
    assert kind is CompactionKind.MERGE_BUCKET and len(inputs) == 10
