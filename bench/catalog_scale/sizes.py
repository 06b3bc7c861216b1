"""The sizes of a run: the issue's full sizes and a quick smoke-test preset."""

from __future__ import annotations

from dataclasses import dataclass

#: The day column every table is partitioned by (identity); one day = one partition.
PARTITION_COLUMN = "day"


@dataclass(frozen=True)
class Sizes:
    tables: int
    """Small tables created first, so every later figure is taken in a catalog that holds them."""
    partitions: int
    """Partitions of the big table."""
    files_per_partition: int
    batch_partitions: int
    """Partitions per setup commit: building a million entries must not take a million commits."""
    ducklake_partitions: int
    """Partitions of DuckLake's big table: ``ducklake_add_data_files`` reads every file's footer
    (about 5 ms a file here), so a million files would take over an hour to register."""
    writers: int
    commits_per_writer: int
    """Long enough that the rate is the steady state: the first commits of a connection pay for
    plan compilation and statement preparation, and 20 commits a writer measured mostly that."""
    single_commits: int
    plan_repeats: int

    @property
    def files(self) -> int:
        return self.partitions * self.files_per_partition

    @property
    def ducklake_files(self) -> int:
        return self.ducklake_partitions * self.files_per_partition


FULL = Sizes(
    tables=1_000,
    partitions=10_000,
    files_per_partition=100,
    batch_partitions=100,
    ducklake_partitions=200,
    writers=32,
    commits_per_writer=100,
    single_commits=1_000,
    plan_repeats=3,
)

QUICK = Sizes(
    tables=20,
    partitions=40,
    files_per_partition=10,
    batch_partitions=10,
    ducklake_partitions=10,
    writers=4,
    commits_per_writer=5,
    single_commits=10,
    plan_repeats=2,
)
