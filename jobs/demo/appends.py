"""``lakestream demo --appends``: the catalog alone, with no Spark, broker or Debezium.

Starts a local PostgreSQL (data under ``<home>/appends``), creates an append table, lets several
writers commit Parquet files concurrently (the catalog orders their commits without locks held
while writing), compacts the small files with the compactor's routine, and shows the history and
a time-travel read. Nothing outside the home directory is touched and nothing keeps running.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from catalog import (
    Catalog,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    Table,
)
from catalog.logs import get_logger
from jobs.localpg import LocalPostgres
from jobs.table_compact import compact_table

log = get_logger("lakestream.demo")
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


@dataclass(frozen=True)
class AppendsConfig:
    home: Path
    writers: int = 4
    batches: int = 25
    rows_per_batch: int = 200


def run_appends(config: AppendsConfig) -> None:
    home = config.home / "appends"
    server = LocalPostgres.start(data_dir=_data_dir(home))
    try:
        _ensure_database(server)
        with Catalog.connect(server.dsn("lakestream"), warehouse=home / "warehouse") as cat:
            events = _fresh_table(cat)
            _write_concurrently(events, config)
            _compact(cat, events)
            _show(events)
    finally:
        server.stop(remove=False)


def _data_dir(home: Path) -> Path:
    path = home / "pg"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ensure_database(server: LocalPostgres) -> None:
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'lakestream'").fetchone():
            conn.execute("CREATE DATABASE lakestream")


def _fresh_table(cat: Catalog) -> Table:
    if cat.table_exists("demo.events"):
        cat.drop_table("demo.events")
    return cat.create_table("demo.events", SCHEMA, partition_by=["region"])


def _write_batch(table: Table, writer: int, batch: int, rows: int) -> None:
    region = ("eu", "us")[batch % 2]
    ids = pa.array(range(batch * rows, (batch + 1) * rows), pa.int64())
    data = pa.table(
        {
            "id": ids,
            "region": pa.array([region] * rows),
            "amount": pa.array([float(i % 97) for i in range(rows)]),
        },
        schema=SCHEMA,
    )
    desc = table.meta.spec.desc({"region": region})
    relative = f"{desc.replace(',', '/')}/w{writer}-{uuid.uuid4().hex}.parquet"
    path = Path(table.meta.location) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path)
    file = DataFile(path=relative, size_bytes=path.stat().st_size, row_count=rows)
    table.commit(
        CommitOp.APPEND,
        [PartitionCommit(partition_desc=desc, ops=(FileOp(action=FileAction.ADD, file=file),))],
        key=IdempotencyKey(
            writer_id=f"demo-{table.meta.table_id.hex[:8]}-w{writer}", batch_id=batch
        ),
    )


def _write_concurrently(table: Table, config: AppendsConfig) -> None:
    def writer(number: int) -> None:
        for batch in range(config.batches):
            _write_batch(table, number, batch, config.rows_per_batch)

    with ThreadPoolExecutor(config.writers) as pool:
        for done in [pool.submit(writer, n) for n in range(config.writers)]:
            done.result()  # a writer's failure stops the demo with its error


def _compact(cat: Catalog, table: Table) -> None:
    """Fold each partition's small files with the compactor's own routine, exactly as
    ``lakestream tables compact`` does (one compaction commit per partition)."""
    print("\n".join(compact_table(cat, table.name).lines()))


def _rows(table: Table, version: int | None = None) -> int:
    plan = table.plan(version=version)
    return sum(pq.read_metadata(Path(table.meta.location) / f.path).num_rows for f in plan.files)


def _show(table: Table) -> None:
    history = table.history(limit=1000)
    print(f"\n{table.name}: {len(history)} versions, {len(table.plan().files)} files now")
    for v in history[:5]:
        print(
            f"  v{v.version:<4} {v.op.value:<10} files +{v.files_added} -"
            f"{v.summary.get('files_removed', 0)}  rows +{v.rows_added}  "
            f"{v.writer_id}/{v.batch_id}"
        )
    middle = history[len(history) // 2].version
    print(f"  rows now: {_rows(table)}; rows as of v{middle}: {_rows(table, middle)}")
