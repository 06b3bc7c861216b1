"""pyiceberg's SqlCatalog on the same PostgreSQL server, appending with ``fast_append``.

The fastest commit path pyiceberg offers for files that already exist: ``DataFile`` entries are
built from each file's footer before timing starts (what ``add_files`` would do inside the
commit), and each commit is ``transaction().update_snapshot().fast_append()`` with one
``append_data_file``. That skips ``add_files``' duplicate-file check, which scans every existing
manifest. Each commit still writes a manifest, a manifest list naming every earlier manifest and a
new ``metadata.json`` holding every snapshot: that is pyiceberg's design, and why it slows down
as history grows. On a conflict pyiceberg itself refreshes and retries up to 4 times with
exponential backoff from 100 ms (its defaults, counted here as internal retries); only then does
``CommitFailedException`` reach the harness, which refreshes the table and tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness import Env, Verification
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField
from workload import PARTITION_DIR, commit_id_of, file_name, write_files

NAMESPACE = "bench"
TABLE = "bench.events"
_DAY_FIELD_ID = 3
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "value", DoubleType(), required=False),
    NestedField(_DAY_FIELD_ID, "day", IntegerType(), required=False),
)
SPEC = PartitionSpec(
    PartitionField(
        source_id=_DAY_FIELD_ID, field_id=1000, transform=IdentityTransform(), name="day"
    )
)


class _RetryCounter(logging.Handler):
    """Counts pyiceberg's own commit retries (it logs one warning per retry) and mutes them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Commit failed due to a concurrent update" in record.getMessage():
            self.count += 1


def _count_retries() -> _RetryCounter:
    counter = _RetryCounter()
    table_logger = logging.getLogger("pyiceberg.table")
    table_logger.addHandler(counter)
    table_logger.propagate = False
    return counter


@dataclass(frozen=True)
class IcebergContext:
    uri: str
    warehouse: str
    data_dir: str
    """URI of the folder holding the data files (``file:///...``)."""


def _catalog(context: IcebergContext) -> SqlCatalog:
    return SqlCatalog("bench", uri=context.uri, warehouse=context.warehouse)


class IcebergWriter:
    def __init__(self, context: IcebergContext, items: Sequence[int]) -> None:
        self._retries = _count_retries()
        self._catalog = _catalog(context)
        self._table: Table = self._catalog.load_table(TABLE)
        io, meta = self._table.io, self._table.metadata
        self._files: dict[int, DataFile] = {
            i: parquet_file_to_data_file(io, meta, f"{context.data_dir}/{file_name(i)}")
            for i in items
        }

    def commit(self, commit_id: int) -> None:
        with self._table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            append.append_data_file(self._files[commit_id])

    def internal_retries(self) -> int:
        return self._retries.count

    def recover(self) -> None:
        self._table.refresh()

    def close(self) -> None:
        self._catalog.engine.dispose()


class IcebergSystem:
    name = "pyiceberg"
    budgeted = True

    def version(self) -> str:
        return f"pyiceberg {metadata.version('pyiceberg')} (SqlCatalog, SQLAlchemy + psycopg2)"

    def setup(self, env: Env, tag: str, commits: int) -> IcebergContext:
        dbname = f"pyiceberg_{tag}"
        env.create_database(dbname)
        warehouse = env.work / dbname
        warehouse.mkdir(parents=True)
        context_stub = IcebergContext(
            uri=f"postgresql+psycopg2://postgres@127.0.0.1:{env.pg_port}/{dbname}",
            warehouse=warehouse.as_uri(),
            data_dir="",
        )
        catalog = _catalog(context_stub)
        catalog.create_namespace(NAMESPACE)
        # the name mapping is what add_files would set: it lets readers map columns of
        # files written without Iceberg field ids
        mapping = create_mapping_from_schema(SCHEMA).model_dump_json()
        table = catalog.create_table(
            TABLE,
            schema=SCHEMA,
            partition_spec=SPEC,
            properties={TableProperties.DEFAULT_NAME_MAPPING: mapping},
        )
        data_dir = f"{table.location()}/data/{PARTITION_DIR}"
        catalog.engine.dispose()
        write_files(Path(data_dir.removeprefix("file://")), commits)
        return IcebergContext(context_stub.uri, context_stub.warehouse, data_dir)

    def open_writer(
        self, context: IcebergContext, writer_index: int, items: Sequence[int]
    ) -> IcebergWriter:
        return IcebergWriter(context, items)

    def verify(self, context: IcebergContext) -> Verification:
        catalog = _catalog(context)
        try:
            table = catalog.load_table(TABLE)
            visible = [commit_id_of(t.file.file_path) for t in table.scan().plan_files()]
            snapshots = len(table.snapshots())
            location = table.metadata_location
        finally:
            catalog.engine.dispose()
        size = Path(location.removeprefix("file://")).stat().st_size
        notes = [f"snapshots: {snapshots}; last metadata.json: {size / 1024:.0f} KiB"]
        return Verification(visible=visible, notes=notes)


SYSTEM = IcebergSystem()
