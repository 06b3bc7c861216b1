"""After the stream: the lake against the source table by table, a query at the latest version
and one as of an earlier version, and what to run next."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from catalog import Catalog

Row = tuple[Any, ...]


@dataclass(frozen=True)
class TableCheck:
    table: str
    source_rows: int
    lake_rows: int
    differences: list[str]

    @property
    def ok(self) -> bool:
        return not self.differences

    def line(self) -> str:
        if self.ok:
            return f"  {self.table:<24} OK   {self.lake_rows} rows, equal to the source"
        return (
            f"  {self.table:<24} DIFFERENT: source {self.source_rows} rows, lake "
            f"{self.lake_rows} rows; {len(self.differences)} keys differ, e.g. "
            + "; ".join(self.differences[:3])
        )


def source_rows(conn: psycopg.Connection[Any], table: str) -> tuple[list[str], dict[Any, Row]]:
    """Columns and rows by key (the first column) of a source table."""
    cursor = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
    columns = [d.name for d in cursor.description or ()]
    return columns, {row[0]: tuple(row) for row in cursor}


def lake_rows(
    catalog: Catalog, table: str, columns: list[str], version: int | None = None
) -> dict[Any, Row]:
    """Rows by key of a lake table (merged on read), at the latest or a given version."""
    data = catalog.load_table(table).scan(columns=columns, version=version).to_arrow()
    return {row[0]: row for row in zip(*(data[c].to_pylist() for c in columns), strict=True)}


def check_table(
    conn: psycopg.Connection[Any], catalog: Catalog, source: str, lake: str
) -> TableCheck:
    columns, want = source_rows(conn, source)
    have = lake_rows(catalog, lake, columns)
    differences = []
    for key in sorted(want.keys() | have.keys()):
        if want.get(key) != have.get(key):
            differences.append(f"{columns[0]}={key}: source {want.get(key)} lake {have.get(key)}")
    return TableCheck(lake, len(want), len(have), differences)


def _cells(row: Row | None) -> str:
    if row is None:
        return "(not there)"
    _, _, status, amount, *_ = row
    return f"{status:<8} {amount:>8}"


def time_travel(catalog: Catalog, table: str, at: dt.datetime) -> list[str]:
    """The orders table at the latest version and as of the time ``at``: totals, and the
    orders that changed between the two, side by side."""
    orders = catalog.load_table(table)
    latest = orders.current_version()
    earlier = orders.resolve_version(as_of=at)
    if not 0 < earlier < latest:  # nothing committed by then, or nothing since
        earlier = latest // 2
    columns = ["id", "customer_id", "status", "amount"]
    now, then = lake_rows(catalog, table, columns), lake_rows(catalog, table, columns, earlier)
    changed = [k for k in sorted(now.keys() | then.keys()) if now.get(k) != then.get(k)]
    lines = [
        f"Time travel on {table}:",
        f"  latest, version {latest}: {len(now)} orders, total {sum(r[3] for r in now.values())}",
        f"  as of {at:%H:%M:%S} UTC (mid-workload), version {earlier}: {len(then)} orders, "
        f"total {sum(r[3] for r in then.values())}",
        f"  {len(changed)} orders changed since version {earlier}; a few of them:",
        f"      {'id':>5}  {'version ' + str(earlier):<17}  {'version ' + str(latest):<17}",
    ]
    picks = changed[:2] + changed[len(changed) // 2 : len(changed) // 2 + 2] + changed[-2:]
    for key in dict.fromkeys(picks):
        lines.append(f"      {key:>5}  {_cells(then.get(key)):<17}  {_cells(now.get(key)):<17}")
    lines.append(
        "  (in Python: catalog.load_table('shop.orders').scan(version=N).to_arrow(); "
        "or scan(as_of=datetime))"
    )
    return lines


def explore_lines(home: Path, port: int, warehouse: Path) -> list[str]:
    """What to run next; every command works once ``lakestream demo --explore`` runs."""
    dsn = f"postgresql://postgres@127.0.0.1:{port}/lakestream"
    return [
        f"Explore: the demo's data stays under {home}; nothing is running now.",
        f"  lakestream demo --explore --home {home}",
        f"      starts its PostgreSQL again on port {port} (Ctrl-C stops it); then, elsewhere:",
        f"  export LAKESTREAM_CATALOG__DSN={dsn}",
        f"  lakestream tables list --dsn {dsn}",
        f"  lakestream tables history shop.orders --dsn {dsn}",
        f"  lakestream compactor status --dsn {dsn}",
        f"  psql postgresql://postgres@127.0.0.1:{port}/shop     # the source database",
        f"  ingest config the demo ran: {home / 'ingest.yaml'}; logs: {home / 'logs'}",
        "  DuckDB over the table's current files (merged on read):",
        "  python - <<'EOF'",
        "  import duckdb",
        "  from catalog import Catalog",
        f"  cat = Catalog.connect('{dsn}', warehouse='{warehouse}')",
        "  orders = cat.load_table('shop.orders').scan().to_reader()",
        "  print(duckdb.sql('SELECT status, count(*), sum(amount) FROM orders GROUP BY status'))",
        "  EOF",
    ]
