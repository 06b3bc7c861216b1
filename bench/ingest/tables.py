"""The lakestream side of the benchmark: the target table, and checking what the job wrote."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.ingest.workload import PRIMARY_KEY, Workload, expected_row, source_schema
from catalog import Catalog, TableNotFoundError
from catalog.conflicts import CONCURRENT_MERGE_PROPERTY
from catalog.meta import SEQUENCE_COLUMN_PROPERTY
from catalog.model import SEQUENCE_COLUMN

_EPOCH = dt.datetime(1970, 1, 1)


def create_cdc_table(catalog: Catalog, name: str, hash_buckets: int) -> int:
    """The table as the job's sink creates it on first sight of a topic (see
    ``ingest.sink.batch.BatchSink._create``): source columns + ``_ls_seq``, the key, the
    sequence-column and concurrent-merge properties.

    Creating it up front measures the steady state: a job that meets a table it has not got
    decodes its first batch twice (once to learn the schema, once to write). Returns the
    table's schema id, to check later that the job did not have to evolve the schema.
    """
    schema = pa.schema([*source_schema(), pa.field(SEQUENCE_COLUMN, pa.binary(16), nullable=False)])
    table = catalog.create_table(
        name,
        schema,
        primary_key=list(PRIMARY_KEY),
        hash_buckets=hash_buckets,
        properties={SEQUENCE_COLUMN_PROPERTY: SEQUENCE_COLUMN, CONCURRENT_MERGE_PROPERTY: "true"},
    )
    return table.meta.current_schema_id


@dataclass(frozen=True)
class TableCheck:
    events: int
    rows: int
    distinct_keys: int
    sampled: int
    mismatches: int
    dead_letters: int
    committed_offsets: int
    versions: int
    schema_unchanged: bool

    @property
    def ok(self) -> bool:
        return (
            self.rows == self.distinct_keys
            and self.mismatches == 0
            and self.dead_letters == 0
            and self.committed_offsets == self.events
        )


def check_table(
    catalog: Catalog,
    *,
    table: str,
    dead_letter_table: str,
    job: str,
    workload: Workload,
    expected_schema_id: int | None,
    sample: int = 2_000,
) -> TableCheck:
    """Row count = distinct keys; ``sample`` random keys hold their last event's values."""
    handle = catalog.load_table(table)
    data = handle.scan().to_arrow()
    ids = data.column("id")
    if pc.count_distinct(ids).as_py() != data.num_rows:
        raise RuntimeError(f"{table} holds duplicate keys")
    last = workload.last_event_of()
    rng = np.random.default_rng(7)
    keys = rng.choice(np.fromiter(last, dtype=np.int64), min(sample, len(last)), replace=False)
    found = {row["id"]: row for row in data.filter(pc.is_in(ids, pa.array(keys))).to_pylist()}
    mismatches = sum(
        1 for key in keys.tolist() if _comparable(found.get(key)) != expected_row(key, last[key])
    )
    try:
        dead = catalog.load_table(dead_letter_table).scan().to_arrow().num_rows
    except TableNotFoundError:
        dead = 0
    progress = catalog.writer_progress(job)
    offsets = progress.source_offsets if progress and progress.source_offsets else {}
    committed = sum(sum(parts.values()) for parts in offsets.values())
    return TableCheck(
        events=workload.events,
        rows=data.num_rows,
        distinct_keys=workload.distinct_keys,
        sampled=len(keys),
        mismatches=mismatches,
        dead_letters=dead,
        committed_offsets=committed,
        versions=handle.current_version(),
        schema_unchanged=expected_schema_id is None
        or handle.meta.current_schema_id == expected_schema_id,
    )


def _comparable(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A scanned row in :func:`expected_row`'s terms (timestamps as microseconds)."""
    if row is None:
        return None
    out = {k: v for k, v in row.items() if not k.startswith("_ls_")}
    stamp = out.get("updated_at")
    if isinstance(stamp, dt.datetime):
        out["updated_at"] = (stamp.replace(tzinfo=None) - _EPOCH) // dt.timedelta(microseconds=1)
    return out
