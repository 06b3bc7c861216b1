"""DuckLake's catalog on the same PostgreSQL: duckdb with the ``ducklake`` and ``postgres_scanner``
extensions loaded from the ``duckdb-extension-*`` wheels (no download at run time).

DuckLake cannot register a file it cannot read: ``ducklake_add_data_files`` opens each file's
Parquet footer for its schema and statistics. So its files are real: one 10-row file per
partition, hard-linked under every name it needs (one write, distinct paths). Reading a local
footer is part of each DuckLake commit and not of lakestream's (which takes the statistics from
its writer); it is the cheapest way DuckLake offers to commit an already-written file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.catalog_scale.sizes import PARTITION_COLUMN
from bench.catalog_scale.systems import Mode

LAKE = "lake"
_ROWS = 10
_COLUMNS = f"id BIGINT, value DOUBLE, {PARTITION_COLUMN} INTEGER"


def extension_files() -> list[Path]:
    """The extension binaries the wheels ship; ImportError if a wheel is not installed."""
    found = []
    for package in ("duckdb_extension_postgres_scanner", "duckdb_extension_ducklake"):
        folder = Path(import_module(package).__file__ or "").parent / "extensions"
        found.extend(sorted(folder.glob("*/*.duckdb_extension")))
    return found


def available() -> bool:
    try:
        return len(extension_files()) == 2
    except ImportError:
        return False


@dataclass(frozen=True)
class LakeAddress:
    port: int
    dbname: str
    data_path: str

    def connect(self) -> Any:
        """A duckdb connection with the lake attached (its metadata in ``dbname``)."""
        import duckdb

        conn = duckdb.connect()
        for path in extension_files():
            conn.execute(f"LOAD '{path}'")
        metadata = f"dbname={self.dbname} host=127.0.0.1 port={self.port} user=postgres"
        conn.execute(
            f"ATTACH 'ducklake:postgres:{metadata}' AS {LAKE} (DATA_PATH '{self.data_path}')"
        )
        return conn


def write_source(folder: Path, day: int) -> Path:
    """One 10-row Parquet file of ``day`` in a hive-style ``day=N`` folder (DuckLake checks the
    partition value of an added file against its path)."""
    folder = folder / f"{PARTITION_COLUMN}={day}"
    folder.mkdir(parents=True, exist_ok=True)
    data = pa.table(
        {
            "id": pa.array(range(_ROWS), pa.int64()),
            "value": pa.array([i / 2 for i in range(_ROWS)], pa.float64()),
            PARTITION_COLUMN: pa.array([day] * _ROWS, pa.int32()),
        }
    )
    path = folder / "source.parquet"
    pq.write_table(data, path)
    return path


def linked(source: Path, names: list[str]) -> list[str]:
    """Hard links of ``source`` under ``names`` in its folder: distinct paths, one write."""
    paths = []
    for name in names:
        path = source.parent / name
        os.link(source, path)
        paths.append(str(path))
    return paths


def create_partitioned(conn: Any, table: str) -> None:
    conn.execute(f"CREATE TABLE {LAKE}.{table} ({_COLUMNS})")
    conn.execute(f"ALTER TABLE {LAKE}.{table} SET PARTITIONED BY ({PARTITION_COLUMN})")


class DuckLakeSide:
    name = "ducklake"

    def __init__(self, address: LakeAddress, files: Path) -> None:
        self._address = address
        self._files = files
        self._conn = address.connect()

    def create_tables(self, count: int) -> None:
        """One commit per table, as lakestream's ``create_table`` is."""
        for i in range(count):
            self._conn.execute("BEGIN")
            create_partitioned(self._conn, f"many_t{i:05d}")
            self._conn.execute("COMMIT")

    def build_big(self, partitions: int, files_per_partition: int, batch: int) -> None:
        create_partitioned(self._conn, "big")
        names = [f"f{i:04d}.parquet" for i in range(files_per_partition)]
        for first in range(0, partitions, batch):
            paths: list[str] = []
            for day in range(first, min(first + batch, partitions)):
                paths.extend(linked(write_source(self._files / "big", day), names))
            self._conn.execute("BEGIN")
            self._conn.execute(f"CALL ducklake_add_data_files('{LAKE}', 'big', ?)", [paths])
            self._conn.execute("COMMIT")

    def plan_full(self) -> int:
        row = self._conn.execute(f"SELECT count(*) FROM ducklake_list_files('{LAKE}', 'big')")
        return int(row.fetchone()[0])

    def plan_one(self, partition: int) -> int:
        """DuckLake has no partition-filtered listing: a filtered count prunes by partition and
        then reads the footers of the partition's files (so this is more than a plan)."""
        query = f"SELECT count(*) FROM {LAKE}.big WHERE {PARTITION_COLUMN} = ?"
        rows = int(self._conn.execute(query, [partition]).fetchone()[0])
        return rows // _ROWS

    def writer_context(self, mode: Mode, writers: int, commits: int) -> DuckLakeContext:
        table = f"w_{mode}_{writers}"
        create_partitioned(self._conn, table)
        files: dict[int, list[str]] = {}
        for w in range(writers):
            source = write_source(self._files / table / f"w{w}", mode.day_of(w))
            files[w] = linked(source, [f"w{w}-c{i}.parquet" for i in range(commits)])
        return DuckLakeContext(address=self._address, table=table, files=files)

    def committed(self, context: object) -> int:
        assert isinstance(context, DuckLakeContext)
        query = f"SELECT count(*) FROM ducklake_list_files('{LAKE}', '{context.table}')"
        return int(self._conn.execute(query).fetchone()[0])

    def close(self) -> None:
        """Before the server stops: a connection closed after it aborts the process."""
        self._conn.close()


@dataclass(frozen=True)
class DuckLakeContext:
    address: LakeAddress
    table: str
    files: dict[int, list[str]]


class DuckLakeWriter:
    """One writer process: its own duckdb and lake attachment; one commit per file."""

    def __init__(self, context: DuckLakeContext, writer_index: int) -> None:
        self._conn = context.address.connect()
        self._call = f"CALL ducklake_add_data_files('{LAKE}', '{context.table}', ?)"
        self._files = context.files[writer_index]

    def commit(self, commit_id: int) -> None:
        self._conn.execute(self._call, [self._files[commit_id]])

    def recover(self) -> None:
        """A failed autocommit statement leaves no transaction open: nothing to do."""

    def close(self) -> None:
        self._conn.close()


def open_writer(context: DuckLakeContext, writer_index: int) -> DuckLakeWriter:
    return DuckLakeWriter(context, writer_index)
