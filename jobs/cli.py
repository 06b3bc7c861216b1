"""The ``lakestream`` command line."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from catalog import Catalog, CatalogError
from catalog.errors import CatalogUnavailableError
from compaction.errors import CompactionError
from jobs.compactor_settings import CompactorSettings
from jobs.logs import configure_logging
from jobs.settings import CatalogSettings, redact_dsn

T = TypeVar("T")
app = typer.Typer(
    no_args_is_help=True, help="lakestream: streaming ingestion into lakehouse tables"
)
catalog_app = typer.Typer(no_args_is_help=True, help="Create and migrate the catalog database.")
tables_app = typer.Typer(
    no_args_is_help=True, help="Inspect, compact, maintain, and delete or update rows of tables."
)
compactor_app = typer.Typer(
    no_args_is_help=True,
    help="The compactor service: keeps tables free of small files and sorted runs.",
)
app.add_typer(catalog_app, name="catalog")
app.add_typer(tables_app, name="tables")
app.add_typer(compactor_app, name="compactor")

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="catalog PostgreSQL DSN (default: $LAKESTREAM_CATALOG_DSN)"),
]
WarehouseOption = Annotated[
    Path | None,
    typer.Option("--warehouse", help="root of table data (default: $LAKESTREAM_WAREHOUSE)"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]


def _connect(dsn: str | None, warehouse: Path | None = None) -> Catalog:
    settings = CatalogSettings()
    configure_logging(settings.log_level)
    target = dsn or settings.dsn()
    try:
        return Catalog.connect(target, warehouse=warehouse or settings.warehouse)
    except CatalogError as exc:
        typer.echo(f"cannot open catalog at {redact_dsn(target)}: {exc}", err=True)
        raise typer.Exit(2) from exc


@catalog_app.command("init")
def catalog_init(dsn: DsnOption = None, warehouse: WarehouseOption = None) -> None:
    """Create or migrate the catalog schema (safe to run again, and from many hosts at once)."""
    with _connect(dsn, warehouse) as cat:
        typer.echo(
            f"catalog ready at {redact_dsn(dsn or CatalogSettings().dsn())}; "
            f"warehouse {cat.warehouse or '(not set)'}"
        )


@tables_app.command("list")
def tables_list(
    namespace: Annotated[str | None, typer.Argument()] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """List live tables, optionally of one namespace."""
    with _connect(dsn) as cat:
        names = cat.list_tables(namespace)
    typer.echo(json.dumps(names) if as_json else "\n".join(names))


@tables_app.command("describe")
def tables_describe(table: str, dsn: DsnOption = None) -> None:
    """Schema, keys, partitioning, location, properties and current version of a table."""
    with _connect(dsn) as cat:
        info = _guard(lambda: cat.load_table(table).describe())
    typer.echo(json.dumps(info, indent=2, default=str))


@tables_app.command("history")
def tables_history(
    table: str, limit: int = 20, dsn: DsnOption = None, as_json: JsonOption = False
) -> None:
    """Versions of a table, newest first: op, time, writer/batch, files and rows."""
    with _connect(dsn) as cat:
        versions = _guard(lambda: cat.load_table(table).history(limit=limit))
    rows = [
        {
            "version": v.version,
            "op": v.op.value,
            "committed_at": v.committed_at.isoformat(),
            "writer": v.writer_id,
            "batch": v.batch_id,
            **v.summary,
        }
        for v in versions
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    typer.echo(
        f"{'version':>8} {'op':<10} {'committed_at':<32} {'files+':>6} {'files-':>6} "
        f"{'rows+':>10}  writer/batch"
    )
    for r in rows:
        typer.echo(
            f"{r['version']:>8} {r['op']:<10} {r['committed_at']:<32} "
            f"{r.get('files_added', 0):>6} {r.get('files_removed', 0):>6} "
            f"{r.get('rows_added', 0):>10}  {r['writer']}/{r['batch']}"
        )


@tables_app.command("compact")
def tables_compact(
    table: str,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition",
            help="only this partition: 'region=eu', or 'region=eu,bucket=0003' (CDC)",
        ),
    ] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compact a table now: fold small files and merge runs; prints what it did.

    Exit codes: 0 done (also when there was nothing to do), 1 a runtime failure (table not
    found, catalog or file error), 2 a usage or configuration mistake (bad --partition, a bad
    compaction table property, compaction disabled).
    """
    from compaction.errors import CompactionError
    from compaction.policy import InvalidPolicyError
    from jobs.table_compact import UsageError, compact_table

    with _connect(dsn) as cat:
        try:
            report = compact_table(cat, table, partition)
        except (UsageError, InvalidPolicyError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        except (CatalogError, CompactionError, OSError) as exc:
            typer.echo(f"error: compacting {table} failed: {exc}", err=True)
            raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
    else:
        typer.echo("\n".join(report.lines()))


DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="say what it would do; change nothing")
]


@tables_app.command("expire")
def tables_expire(
    table: str,
    *,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than", help="expire versions older than this, e.g. 7d (snapshot.time-retained)"
        ),
    ] = None,
    retain_last: Annotated[
        str | None,
        typer.Option(
            "--retain-last", help="always keep this many newest versions (snapshot.retain-last)"
        ),
    ] = None,
    dry_run: DryRunOption = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Snapshot expiry: remove old versions and the catalog rows only they need.

    Exit codes: 0 done, 1 a runtime failure (no such table, catalog error), 2 a bad argument or
    table property."""
    from jobs import table_maintenance as tm

    report = _maintenance(
        dsn, table, lambda cat: tm.expire(cat, table, older_than, retain_last, dry_run)
    )
    _print_report(report, tm.expire_lines(report), as_json)


@tables_app.command("vacuum")
def tables_vacuum(
    table: str,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than", help="only files older than this, e.g. 1h (vacuum.older-than)"
        ),
    ] = None,
    dry_run: DryRunOption = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete files handed to cleanup and orphan files no retained version or prepared commit
    names. Exit codes as for expire."""
    from jobs import table_maintenance as tm

    report = _maintenance(dsn, table, lambda cat: tm.vacuum(cat, table, older_than, dry_run))
    _print_report(report, tm.vacuum_lines(report), as_json)


@tables_app.command("ttl")
def tables_ttl(
    table: str, dry_run: DryRunOption = False, dsn: DsnOption = None, as_json: JsonOption = False
) -> None:
    """Drop the partitions older than the table's partition.ttl in one update commit."""
    from jobs import table_maintenance as tm

    report = _maintenance(dsn, table, lambda cat: tm.ttl(cat, table, dry_run))
    _print_report(report, tm.ttl_lines(report), as_json)


def _maintenance(dsn: str | None, table: str, action: Callable[[Catalog], T]) -> T:
    """A bad argument or property: one line, exit 2; a runtime failure: one line, exit 1."""
    from jobs.table_maintenance import UsageError

    with _connect(dsn) as cat:
        try:
            return action(cat)
        except UsageError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        except (CatalogError, OSError) as exc:
            typer.echo(f"error: {table}: {exc}", err=True)
            raise typer.Exit(1) from exc


def _print_report(report: Any, lines: list[str], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, default=str))
    else:
        typer.echo("\n".join(lines))


WhereOption = Annotated[
    str,
    typer.Option(
        "--where",
        help="which rows: \"region = 'eu' AND total > 10\" (= != <> < <= > >=, IN (...), "
        "IS [NOT] NULL, joined by AND)",
    ),
]


@tables_app.command("delete")
def tables_delete(
    table: str, where: WhereOption, dsn: DsnOption = None, as_json: JsonOption = False
) -> None:
    """Delete the rows matching --where: one commit (exit 2: bad --where; 1: runtime failure)."""
    _dml(table, where, None, dsn, as_json)


@tables_app.command("update")
def tables_update(
    table: str,
    where: WhereOption,
    assign: Annotated[
        list[str],
        typer.Option("--set", help="column='value' (several: comma separated or --set again)"),
    ],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set columns of the rows matching --where: one commit (exit 2: bad --where/--set)."""
    _dml(table, where, assign, dsn, as_json)


def _dml(table: str, where: str, assign: list[str] | None, dsn: str | None, as_json: bool) -> None:
    from jobs.table_dml import DmlUsageError, report_json, report_line, run_dml

    with _connect(dsn) as cat:
        try:
            result = run_dml(cat, table, where, assign)
        except DmlUsageError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        except (CatalogError, OSError) as exc:
            typer.echo(f"error: {'updating' if assign else 'deleting from'} {table} failed: "
                       f"{exc}", err=True)  # fmt: skip
            raise typer.Exit(1) from exc
    typer.echo(json.dumps(report_json(result)) if as_json else report_line(result))


def _guard(action: Callable[[], T]) -> T:
    """Run a catalog action; a catalog error becomes a one-line message and exit code 1."""
    try:
        return action()
    except CatalogError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


TablesPattern = Annotated[
    str | None,
    typer.Option(
        "--tables",
        help="fnmatch patterns on namespace.table, comma separated "
        "(default: $LAKESTREAM_COMPACTOR_TABLES or '*')",
    ),
]


@compactor_app.command("run")
def compactor_run(
    *,
    tables: TablesPattern = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="worker processes (default 2; 0: none)")
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="plan once, run what is queued, exit")
    ] = False,
    poll_seconds: Annotated[
        float | None, typer.Option("--poll-seconds", help="plan at least this often")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", help="serve /metrics and /healthz here")
    ] = None,
    dsn: DsnOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Run the compactor: plan tasks from the latest snapshots, run them in a worker pool."""
    from jobs.compactor_main import install_stop_handlers, run_service

    flags = {
        "tables": tables,
        "workers": workers,
        "poll_seconds": poll_seconds,
        "metrics_port": metrics_port,
    }
    settings, catalog_settings, target = _compactor_settings(flags, dsn)
    stop = threading.Event()
    install_stop_handlers(stop)
    code = _compactor_guard(
        target,
        lambda: run_service(
            target,
            warehouse or catalog_settings.warehouse,
            settings,
            once=once,
            log_level=catalog_settings.log_level,
            stop=stop,
        ),
    )
    raise typer.Exit(code)


@compactor_app.command("worker")
def compactor_worker(dsn: DsnOption = None, warehouse: WarehouseOption = None) -> None:
    """Run one worker process that takes tasks from the shared queue (scale out with more)."""
    from jobs.compactor_main import install_stop_handlers, run_worker

    settings, catalog_settings, target = _compactor_settings({}, dsn)
    stop = threading.Event()
    install_stop_handlers(stop)
    code = _compactor_guard(
        target,
        lambda: run_worker(target, warehouse or catalog_settings.warehouse, settings, stop=stop),
    )
    raise typer.Exit(code)


@compactor_app.command("status")
def compactor_status(
    tables: TablesPattern = None, dsn: DsnOption = None, as_json: JsonOption = False
) -> None:
    """Per table: small-file backlog, max runs per bucket, queue, running tasks, last results."""
    from compaction.queue import TaskQueue
    from compaction.status import collect_status

    settings, _, target = _compactor_settings({"tables": tables}, dsn)
    with _connect(target) as cat:
        queue = TaskQueue(cat.store, settings.queue())
        found = _compactor_guard(target, lambda: collect_status(cat, queue, settings.patterns()))
    if as_json:
        typer.echo(json.dumps([s.to_json() for s in found], indent=2, default=str))
        return
    typer.echo(
        f"{'table':<32} {'kind':<6} {'version':>8} {'files':>6} {'small':>6} "
        f"{'max runs':>8} {'queued':>6} {'running':>7}  last result"
    )
    for s in found:
        last = s.last_results[0] if s.last_results else None
        summary = f"{last.outcome} {last.partition_desc} ({last.duration_s:.1f}s)" if last else "-"
        typer.echo(
            f"{s.table:<32} {s.kind:<6} {s.version:>8} {s.files:>6} {s.small_files:>6} "
            f"{s.max_runs_per_bucket:>8} {s.queued:>6} {len(s.running):>7}  {summary}"
        )
        if s.error:
            typer.echo(f"    error: {s.error}")
        if s.maintenance is not None:
            typer.echo(f"    maintenance: {_maintenance_line(s.maintenance)}")
        for t in s.running:
            typer.echo(
                f"    running {t.partition_desc} on {t.worker_id} for {t.running_s or 0:.0f}s "
                f"(lease {t.lease_left_s or 0:.0f}s left, attempt {t.attempts})"
            )


def _maintenance_line(m: Any) -> str:
    """``lakestream compactor status``: a table's last maintenance run and the next one."""
    r = m.last_report or {}
    last = "not run yet"
    if m.last_finished_at is not None:
        last = (
            f"last {m.last_finished_at:%Y-%m-%d %H:%M:%S}: expired {r.get('versions_expired', 0)} "
            f"version(s) (oldest kept {r.get('oldest_version', '-')}), dropped "
            f"{r.get('ttl_partitions_dropped', 0)} partition(s), deleted "
            f"{r.get('files_deleted', 0)} file(s)"
        )
    error = f"; error: {m.last_error}" if m.last_error else ""
    return f"{last}; next {m.next_at:%Y-%m-%d %H:%M:%S}; runs {m.runs}{error}"


def _compactor_settings(
    flags: Mapping[str, object], dsn: str | None
) -> tuple[CompactorSettings, CatalogSettings, str]:
    """Settings from flags over the environment; a bad value is one line and exit code 2."""
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        catalog_settings = CatalogSettings()
        settings = CompactorSettings(**given)  # type: ignore[arg-type]
        target = dsn or catalog_settings.dsn()
    except (ValidationError, ValueError) as exc:
        typer.echo(f"error: {_one_line(exc)}", err=True)
        raise typer.Exit(2) from exc
    configure_logging(catalog_settings.log_level)
    return settings, catalog_settings, target


def _compactor_guard(dsn: str, action: Callable[[], T]) -> T:
    """Catalog unreachable: exit 2; a catalog or compaction failure: one line, exit 1."""
    try:
        return action()
    except CatalogUnavailableError as exc:
        typer.echo(f"cannot open catalog at {redact_dsn(dsn)}: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (CatalogError, CompactionError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)


@app.command("ingest")
def ingest(
    config: Annotated[Path, typer.Option("--config", help="ingest YAML (see README)")],
) -> None:
    """Run the streaming ingest job (Kafka -> tables); stops cleanly on SIGTERM."""
    from jobs.ingest_main import main as ingest_main

    raise typer.Exit(ingest_main(config))


@app.command("demo")
def demo(
    home: Annotated[Path, typer.Option(help="where the demo keeps its data")] = Path(
        ".lakestream/demo"
    ),
    duration: Annotated[float, typer.Option(help="seconds the source workload runs", min=1)] = 60.0,
    explore: Annotated[
        bool, typer.Option("--explore", help="start the kept PostgreSQL again, to explore")
    ] = False,
    appends: Annotated[
        bool, typer.Option("--appends", help="the smaller catalog-only walk-through instead")
    ] = False,
) -> None:
    """Run the main job on embedded defaults: PostgreSQL -> Debezium -> broker -> ingest ->
    compactor, under a live workload; then check the lake against the source (Ctrl-C: 130)."""
    from jobs.demo import main as demo_main

    raise typer.Exit(demo_main(home, duration=duration, explore=explore, appends=appends))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
