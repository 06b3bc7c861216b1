"""The ``lakestream`` command line.

Every failure ends the command with ONE line on stderr, ``error: <what was wrong>; <what to
do>``, and an exit code: 2 for a usage or configuration mistake (a bad flag or argument, a
setting or a YAML key, a DSN that does not parse or a catalog that cannot be opened), 1 for a
failure at run time (no such table, a catalog, compaction, ingest or file error). ``--debug``
(or ``LAKESTREAM_DEBUG=1``) adds the traceback. :func:`main` is the one place that decides this:
commands raise, they do not print errors themselves.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from catalog import Catalog, CatalogError, CatalogNotInitializedError, check_schema_name
from catalog.errors import CatalogUnavailableError, TableNotFoundError
from jobs.logs import configure_logging
from jobs.reach import check_catalog_reachable
from jobs.settings import (
    CommandSettings,
    ConfigError,
    config_errors,
    describe_errors,
    redact_dsn,
)
from jobs.status import watermark_text

if TYPE_CHECKING:
    from jobs.compactor_settings import CompactorSettings

# Each command imports what only it needs (the ingest and compaction packages, the compactor's
# settings) inside its function: a command that touches the catalog alone starts in about half
# the time, which every scripted call and health probe pays.

T = TypeVar("T")

#: Exit codes of every command.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_CODES = (
    "Exit codes: 0 done; 1 a failure at run time (no such table, a catalog, compaction, ingest "
    "or file error); 2 a usage or configuration mistake (a bad flag, setting or YAML key, a DSN "
    "that does not parse, a catalog that cannot be opened). A failure is one line on stderr; "
    "--debug (or LAKESTREAM_DEBUG=1) adds the traceback."
)
DEBUG_ENV = "LAKESTREAM_DEBUG"

app = typer.Typer(
    no_args_is_help=True,
    help="lakestream: streaming ingestion into lakehouse tables",
    epilog=EXIT_CODES,
    pretty_exceptions_enable=False,
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
    typer.Option("--dsn", help="catalog PostgreSQL DSN (default: $LAKESTREAM_CATALOG__DSN)"),
]
WarehouseOption = Annotated[
    str | None,
    typer.Option(
        "--warehouse", help="root of table data (default: $LAKESTREAM_CATALOG__WAREHOUSE)"
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
SCHEMA_ENV = "LAKESTREAM_CATALOG__SCHEMA"


def _use_schema(value: str | None) -> str | None:
    """``--schema`` overrides the environment for this process and the processes it starts
    (the compactor's workers), so every catalog it opens is in that schema."""
    if value is not None:
        try:
            os.environ[SCHEMA_ENV] = check_schema_name(value)
        except CatalogError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


SchemaOption = Annotated[
    str | None,
    typer.Option(
        "--schema",
        help=f"PostgreSQL schema of the catalog (default: ${SCHEMA_ENV} or lakestream)",
        callback=_use_schema,
        expose_value=False,
    ),
]


@dataclass
class _RunState:
    """What the error boundary needs to know about this run."""

    debug: bool = False
    #: Passwords of the DSNs this run used: masked in any message that would show them.
    secrets: list[str] = field(default_factory=list)


_Run = _RunState()


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option("--debug", envvar=DEBUG_ENV, help="on a failure, show the traceback too"),
    ] = False,
) -> None:
    _Run.debug = debug


def _settings(dsn: str | None = None, warehouse: str | None = None) -> CommandSettings:
    """The settings of a catalog command, flags over the environment; configures logging."""
    catalog = {k: v for k, v in {"dsn": dsn, "warehouse": warehouse}.items() if v is not None}
    with config_errors(CommandSettings):
        settings = CommandSettings(catalog=catalog)
    configure_logging(settings.log_level)
    return settings


def _dsn(settings: CommandSettings) -> str:
    dsn = settings.catalog.required_dsn()
    _remember_secret(dsn)
    return dsn


def _remember_secret(dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    password = conninfo_to_dict(dsn).get("password")
    if password:
        _Run.secrets.append(str(password))


def _connect(dsn: str | None, warehouse: str | None = None) -> Catalog:
    settings = _settings(dsn, warehouse)
    return _open(_dsn(settings), settings)


def _open(dsn: str, settings: CommandSettings, *, create: bool = False) -> Catalog:
    """The catalog; one that cannot be opened is a configuration mistake (exit 2).

    Only ``catalog init`` passes ``create``: every other command needs a catalog that exists, so
    it neither creates nor migrates one (it says to run init)."""
    check_catalog_reachable(dsn)  # at once and in one line, rather than after the pool's wait
    try:
        return Catalog.connect(
            dsn,
            warehouse=settings.catalog.warehouse,
            storage=settings.catalog.storage,
            schema=settings.catalog.db_schema,
            create=create,
        )
    except CatalogNotInitializedError as exc:
        raise ConfigError(str(exc)) from exc
    except CatalogError as exc:
        raise ConfigError(
            f"cannot open catalog at {redact_dsn(dsn)}: {exc}; check that the database runs "
            "there and the DSN (--dsn or LAKESTREAM_CATALOG__DSN) is right"
        ) from exc


@catalog_app.command("init")
def catalog_init(
    dsn: DsnOption = None, warehouse: WarehouseOption = None, schema: SchemaOption = None
) -> None:
    """Create or migrate the catalog schema (safe to run again, and from many hosts at once)."""
    settings = _settings(dsn, warehouse)
    target = _dsn(settings)
    with _open(target, settings, create=True) as cat:
        typer.echo(
            f"catalog ready at {redact_dsn(target)} (schema {cat.store.schema}); "
            f"warehouse {cat.warehouse or '(not set)'}"
        )


@tables_app.command("list")
def tables_list(
    namespace: Annotated[str | None, typer.Argument()] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="also the jobs' own tables (lakestream_jobs.*)")
    ] = False,
) -> None:
    """List live tables, optionally of one namespace.

    The ingest jobs' held tables (namespace ``lakestream_jobs``: events of source transactions
    not published yet) are internal: listed only with ``--all`` or when that namespace is asked
    for."""
    from ingest.sink.held import HELD_NAMESPACE

    with _connect(dsn) as cat:
        names = cat.list_tables(namespace)
    if not show_all and namespace is None:
        names = [n for n in names if not n.startswith(f"{HELD_NAMESPACE}.")]
    typer.echo(json.dumps(names) if as_json else "\n".join(names))


@tables_app.command("describe")
def tables_describe(table: str, dsn: DsnOption = None, schema: SchemaOption = None) -> None:
    """Schema, keys, partitioning, location, properties and current version of a table."""
    with _connect(dsn) as cat:
        info = cat.load_table(table).describe()
    typer.echo(json.dumps(info, indent=2, default=str))


@tables_app.command("history")
def tables_history(
    table: str,
    limit: Annotated[int, typer.Option(min=1, help="at most this many versions")] = 20,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Versions of a table, newest first: op, time, files and rows, source watermark (ingest
    jobs in transactions: consistent mode; 'exceptions' marks a version that published a
    transaction incomplete), writer/batch."""
    with _connect(dsn) as cat:
        handle = cat.load_table(table)
        versions = handle.history(limit=limit)
    # a CDC table's files hold changes (inserts, updates, deletes), not rows of the table
    unit = "changes" if handle.meta.is_cdc else "rows"
    rows = [
        {
            "version": v.version,
            "op": v.op.value,
            "committed_at": v.committed_at.isoformat(),
            "writer": v.writer_id,
            "batch": v.batch_id,
            **v.summary,
            "rows_added_unit": unit,
            "source_watermark": v.summary.get("source_watermark"),
            "watermark": watermark_text(v.source_watermark, v.watermark_exceptions),
        }
        for v in versions
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    typer.echo(
        f"{'version':>8} {'op':<10} {'committed_at':<32} {'files+':>6} {'files-':>6} "
        f"{unit + '+':>10}  {'source watermark':<34}  writer/batch"
    )
    for r in rows:
        typer.echo(
            f"{r['version']:>8} {r['op']:<10} {r['committed_at']:<32} "
            f"{r.get('files_added', 0):>6} {r.get('files_removed', 0):>6} "
            f"{r.get('rows_added', 0):>10}  {r['watermark']:<34}  {r['writer']}/{r['batch']}"
        )


@tables_app.command("changes")
def tables_changes(
    table: str,
    *,
    start: Annotated[
        int, typer.Option("--from", min=0, help="first version whose changes to show (included)")
    ],
    end: Annotated[
        int | None,
        typer.Option("--to", min=0, help="last version whose changes to show (default: latest)"),
    ] = None,
    net: Annotated[
        bool, typer.Option("--net", help="one net change per key across the versions")
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """The rows versions --from..--to changed (both included): insert, update_preimage,
    update_postimage, delete, with the version and time of each (exit 2: bad range; 1: the
    versions were expired, or another runtime failure)."""
    if end is not None and end < start:
        raise typer.BadParameter(f"--to {end} is below --from {start}", param_hint="--to")
    with _connect(dsn) as cat:
        try:
            changes = cat.load_table(table).changes(start, end, net=net)
        except TableNotFoundError:
            raise
        except (CatalogError, OSError) as exc:
            raise _Failed(f"{table}: {exc}") from exc
    rows = changes.to_pylist()
    if as_json:
        typer.echo(json.dumps(rows, default=_json_value))
        return
    typer.echo("\n".join(_change_lines(changes.column_names, rows)))


def _json_value(value: object) -> object:
    isoformat = getattr(value, "isoformat", None)
    return isoformat() if callable(isoformat) else str(value)


def _change_lines(names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Version, change type, then the table's columns, aligned; the commit time is in --json."""
    shown = ["_commit_version", "_change_type", *names[:-3]]
    cells = [["version", "change", *names[:-3]]]
    cells += [["null" if r[c] is None else str(r[c]) for c in shown] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return [*lines, f"({len(rows)} changes)"]


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
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compact a table now: fold small files and merge runs; prints what it did.

    Exit codes: 0 done (also when there was nothing to do), 1 a runtime failure (table not
    found, catalog or file error), 2 a usage or configuration mistake (bad --partition, a bad
    compaction table property, compaction disabled).
    """
    from compaction import CompactionError, InvalidPolicyError
    from jobs.table_compact import compact_table

    with _connect(dsn) as cat:
        try:
            report = compact_table(cat, table, partition)
        except InvalidPolicyError:
            raise  # a bad compaction property: a configuration mistake
        except (CatalogError, CompactionError, OSError) as exc:
            raise _Failed(f"compacting {table} failed: {exc}") from exc
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
    else:
        typer.echo("\n".join(report.lines()))


@app.command("compact")
def compact_command(
    tables: Annotated[
        list[str] | None, typer.Argument(help="tables to compact (namespace.table)")
    ] = None,
    *,
    every: Annotated[bool, typer.Option("--all", help="every live table")] = False,
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="local (this process) or spark (default: local)"),
    ] = None,
    master: Annotated[
        str | None,
        typer.Option("--master", help="Spark master, local[N] or spark://host:port"),
    ] = None,
    spark_tasks: Annotated[
        int | None, typer.Option("--spark-tasks", help="Spark tasks to group the work into")
    ] = None,
    dsn: DsnOption = None,
    warehouse: WarehouseOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compact a backlog now: every partition and bucket of the tables, each task committed
    on its own; --engine spark runs the tasks as Spark tasks.

    Exit codes: 0 done, 1 a task or the run failed (the report says which), 2 a usage or
    configuration mistake (no tables, a bad property, compaction disabled, no Spark extra).
    """
    from compaction import CompactionError, InvalidPolicyError
    from jobs.table_compact import CompactSettings, UsageError, check_engine, run_compact

    if bool(tables) == every:
        raise UsageError("name the tables to compact, or pass --all (not both)")
    flags = {"engine": engine, "master": master, "spark_tasks": spark_tasks}
    given: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    catalog = {k: v for k, v in {"dsn": dsn, "warehouse": warehouse}.items() if v is not None}
    with config_errors(CompactSettings):
        settings = CompactSettings(catalog=catalog, **given)
    configure_logging(settings.log_level)
    check_engine(settings)
    target = _dsn(settings)
    with _open(target, settings) as cat:
        try:
            report = run_compact(cat, settings, target, None if every else tables)
        except InvalidPolicyError:
            raise  # a configuration mistake
        except (CatalogError, CompactionError, OSError) as exc:
            raise _Failed(f"compacting failed: {exc}") from exc
    typer.echo(json.dumps(report.as_json(), indent=2) if as_json else "\n".join(report.lines()))
    if report.failed:
        raise _Failed(f"{report.failed} compaction task(s) failed (see the report); run again")


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
    schema: SchemaOption = None,
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
    *,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than", help="only files older than this, e.g. 1h (vacuum.older-than)"
        ),
    ] = None,
    dry_run: DryRunOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete files handed to cleanup and orphan files no retained version or prepared commit
    names. Exit codes as for expire."""
    from jobs import table_maintenance as tm

    report = _maintenance(dsn, table, lambda cat: tm.vacuum(cat, table, older_than, dry_run))
    _print_report(report, tm.vacuum_lines(report), as_json)


@tables_app.command("iceberg")
def tables_iceberg(
    table: str,
    *,
    register: Annotated[
        bool,
        typer.Option(
            "--register",
            help="publish through pyiceberg's SQL catalog on the catalog's database, so "
            "SqlCatalog(...).load_table(TABLE) finds it (keep passing it once used)",
        ),
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Export a table's versions as Iceberg v2 metadata in its location: the first run
    backfills every retained version, later runs add what changed since. Prints the metadata
    location and the versions exported. Needs the iceberg extra (pip install
    'lakestream[iceberg]').

    Exit codes: 0 done (also when nothing changed), 1 a runtime failure (no such table,
    catalog or file error, a concurrent export won: run again), 2 a usage mistake."""
    try:
        from pyiceberg.exceptions import CommitFailedException

        from catalog.iceberg import export_table, sql_catalog
    except ImportError as exc:
        raise ConfigError(
            f"Iceberg export needs pyiceberg: pip install 'lakestream[iceberg]' ({exc})"
        ) from exc
    settings = _settings(dsn)
    target = _dsn(settings)
    registry = sql_catalog(target) if register else None
    with _open(target, settings) as cat:
        try:
            report = export_table(cat.load_table(table), sql_catalog=registry)
        except (CatalogError, OSError, CommitFailedException) as exc:
            raise _Failed(f"{table}: {exc}") from exc
        finally:
            if registry is not None:
                registry.engine.dispose()
    exported = ", ".join(map(str, report.exported)) or "none"
    lines = [
        f"{report.table}: Iceberg metadata at {report.metadata_location}",
        f"exported versions: {exported}; shows version {report.version} of {report.latest} "
        f"(lag {report.lag_versions} versions); expired {report.snapshots_expired} snapshots",
    ]
    if report.registered:
        lines.append(f"registered in the SQL catalog as {report.registered}")
    _print_report(report, lines, as_json)


@tables_app.command("ttl")
def tables_ttl(
    table: str,
    dry_run: DryRunOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Drop the partitions older than the table's partition.ttl in one update commit."""
    from jobs import table_maintenance as tm

    report = _maintenance(dsn, table, lambda cat: tm.ttl(cat, table, dry_run))
    _print_report(report, tm.ttl_lines(report), as_json)


def _maintenance(dsn: str | None, table: str, action: Callable[[Catalog], T]) -> T:
    """A bad argument or property: exit 2; a runtime failure names the table: exit 1."""
    with _connect(dsn) as cat:
        try:
            return action(cat)
        except (CatalogError, OSError) as exc:
            raise _Failed(f"{table}: {exc}") from exc


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
    table: str,
    where: WhereOption,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete the rows matching --where: one commit (exit 2: bad --where; 1: runtime failure)."""
    _dml(table, where, None, dsn, as_json)


@tables_app.command("update")
def tables_update(
    table: str,
    *,
    where: WhereOption,
    assign: Annotated[
        list[str],
        typer.Option("--set", help="column='value' (several: comma separated or --set again)"),
    ],
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set columns of the rows matching --where: one commit (exit 2: bad --where/--set)."""
    _dml(table, where, assign, dsn, as_json)


def _dml(table: str, where: str, assign: list[str] | None, dsn: str | None, as_json: bool) -> None:
    from jobs.table_dml import report_json, report_line, run_dml

    with _connect(dsn) as cat:
        try:
            result = run_dml(cat, table, where, assign)
        except (CatalogError, OSError) as exc:
            doing = "updating" if assign else "deleting from"
            raise _Failed(f"{doing} {table} failed: {exc}") from exc
    typer.echo(json.dumps(report_json(result)) if as_json else report_line(result))


TablesPattern = Annotated[
    str | None,
    typer.Option(
        "--tables",
        help="fnmatch patterns on namespace.table, comma separated "
        "(default: $LAKESTREAM_COMPACTOR__TABLES or '*')",
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
    schema: SchemaOption = None,
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
    settings, target = _compactor_settings(flags, dsn, warehouse)
    stop = threading.Event()
    install_stop_handlers(stop)
    code = run_service(
        target,
        settings.catalog.warehouse,
        settings,
        once=once,
        log_level=settings.log_level,
        stop=stop,
    )
    raise typer.Exit(code)


@compactor_app.command("worker")
def compactor_worker(
    dsn: DsnOption = None, warehouse: WarehouseOption = None, schema: SchemaOption = None
) -> None:
    """Run one worker process that takes tasks from the shared queue (scale out with more)."""
    from jobs.compactor_main import install_stop_handlers, run_worker

    settings, target = _compactor_settings({}, dsn, warehouse)
    stop = threading.Event()
    install_stop_handlers(stop)
    raise typer.Exit(run_worker(target, settings.catalog.warehouse, settings, stop=stop))


@compactor_app.command("status")
def compactor_status(
    tables: TablesPattern = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per table: small-file backlog, max runs per bucket, queue, running tasks, last results,
    write amplification."""
    from compaction.queue import TaskQueue
    from compaction.status import collect_status

    settings, target = _compactor_settings({"tables": tables}, dsn, None)
    with _open(target, settings) as cat:
        queue = TaskQueue(cat.store, settings.queue())
        found = collect_status(cat, queue, settings.patterns())
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
        if s.amplification is not None and s.amplification.ratio is not None:
            amp = s.amplification
            typer.echo(
                f"    write amplification {amp.ratio:.2f}x over the last hour of versions "
                f"({amp.compaction_bytes_written:,} bytes compacted / "
                f"{amp.ingest_bytes_added:,} ingested)"
            )
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
    flags: Mapping[str, object], dsn: str | None, warehouse: str | None
) -> tuple[CompactorSettings, str]:
    """The compactor's settings, flags over the environment, and the catalog's DSN."""
    from jobs.compactor_settings import CompactorSettings

    given: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    catalog = {k: v for k, v in {"dsn": dsn, "warehouse": warehouse}.items() if v is not None}
    with config_errors(CompactorSettings):
        settings = CompactorSettings(catalog=catalog, **given)
    configure_logging(settings.log_level)
    return settings, _dsn(settings)


BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers",
        envvar="LAKESTREAM_INGEST__KAFKA__BOOTSTRAP_SERVERS",
        help="the job's Kafka brokers, to show the lag per partition "
        "(default: $LAKESTREAM_INGEST__KAFKA__BOOTSTRAP_SERVERS; none: no lag)",
    ),
]


@app.command("status")
def status(
    job: Annotated[
        str | None,
        typer.Argument(help="the job's name (default with --config: the YAML's 'job')"),
    ] = None,
    *,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="the job's ingest YAML: its name, catalog and brokers"),
    ] = None,
    bootstrap_servers: BootstrapOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """A job's freshness: last batch and when, source watermark and its age, held
    transactions, and the lag per topic-partition (offsets and seconds) from the brokers."""
    import datetime as dt

    from jobs.status import collect, render, to_json

    kafka = {"bootstrap.servers": bootstrap_servers} if bootstrap_servers else None
    if config is not None:
        from jobs.ingest_config import IngestSettings

        own = IngestSettings.from_yaml(config)
        job = job or own.job
        dsn = dsn or own.catalog.dsn.get_secret_value()
        options = {k: v.get_secret_value() for k, v in own.kafka.options.items()}
        kafka = {**options, "bootstrap.servers": bootstrap_servers or own.kafka.bootstrap_servers}
    if job is None:
        raise ConfigError("name the job (lakestream status JOB) or give its --config")
    with _connect(dsn) as cat:
        found = collect(cat, job, kafka)
    now = dt.datetime.now(dt.UTC)
    if as_json:
        typer.echo(json.dumps(to_json(found, now), indent=2))
        return
    for line in render(found, now, brokers=kafka is not None):
        typer.echo(line)


@app.command("ingest")
def ingest(
    config: Annotated[Path, typer.Option("--config", help="ingest YAML (see docs/ingest.md)")],
) -> None:
    """Run the streaming ingest job (Kafka -> tables); stops cleanly on SIGTERM."""
    from jobs.ingest_config import IngestSettings

    IngestSettings.from_yaml(config)  # a mistake in the file is named before a missing extra
    from jobs.ingest_main import main as ingest_main

    raise typer.Exit(ingest_main(config))


@app.command("spark-archive")
def spark_archive(
    force: Annotated[
        bool, typer.Option("--force", help="build it again though a whole one is there")
    ] = False,
) -> None:
    """Build the Spark driver's class archive: every job's Spark then starts ~2x faster. Once
    per machine, Java and pyspark (about a minute); dev/setup and the Docker image run it."""
    from ingest.spark_archive import archive_for, build
    from jobs.spark_env import spark_host

    host = spark_host()
    archive = archive_for({}, host)
    if archive is not None and (force or not archive.is_whole()):
        typer.echo("building the Spark driver's class archive (about a minute, once)", err=True)
    path = build(host, force=force)
    typer.echo(f"{path} ({path.stat().st_size / 1e6:.0f} MB)")


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


class _Failed(Exception):
    """A failure at run time whose message already says what failed (exit 1)."""


_Outcomes = tuple[tuple[tuple[type[BaseException], ...], int, str], ...]


@functools.cache
def _outcomes() -> _Outcomes:
    """(exception types, exit code, what to do), the first match deciding.

    Built on the first failure: the packages named here are imported by then if one of their
    errors was raised, and a command that never fails does not load them for this table."""
    from compaction import CompactionError, InvalidPolicyError
    from ingest.errors import IngestError
    from ingest.transactions import TransactionConfigError
    from jobs.table_compact import UsageError as CompactUsageError
    from jobs.table_dml import DmlUsageError
    from jobs.table_maintenance import UsageError as MaintenanceUsageError

    return (
        ((ConfigError,), EXIT_USAGE, ""),
        ((ValidationError,), EXIT_USAGE, "fix the setting named"),
        (
            (
                CompactUsageError,
                MaintenanceUsageError,
                DmlUsageError,
                InvalidPolicyError,
                TransactionConfigError,
            ),
            EXIT_USAGE,
            "",
        ),
        (
            (CatalogUnavailableError,),
            EXIT_USAGE,
            "check that the catalog database runs and the DSN (--dsn or LAKESTREAM_CATALOG__DSN) "
            "is right",
        ),
        ((TableNotFoundError,), EXIT_FAILED, "see 'lakestream tables list'"),
        ((_Failed, CatalogError, CompactionError, IngestError, OSError), EXIT_FAILED, ""),
    )


#: Modules of the ``spark`` extra (``pip install 'lakestream[spark]'``).
_SPARK_EXTRA = frozenset({"pyspark", "confluent_kafka", "pandas"})


def explain(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one line for a command's failure."""
    if isinstance(exc, ModuleNotFoundError) and exc.name in _SPARK_EXTRA:
        return EXIT_USAGE, (
            f"{exc.name} is not installed: this command needs the Spark extra; install it with "
            "pip install 'lakestream[spark]'"
        )
    for types, code, hint in _outcomes():
        if isinstance(exc, types):
            text = _one_line(exc)
            return code, f"{text}; {hint}" if hint else text
    name = type(exc).__name__
    return EXIT_FAILED, f"unexpected {name}: {_one_line(exc)}; rerun with --debug for the traceback"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return describe_errors(exc, CommandSettings, None)
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in _Run.secrets:
        text = text.replace(secret, "***")
    return text


def _usage_line(exc: typer.TyperException) -> str:
    """Click's message for a bad flag or argument, and where to look."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "lakestream"
    return f"{' '.join(exc.format_message().split()).rstrip('.')}; see '{command} --help'"


def main(argv: list[str] | None = None) -> int:
    """Run a command; a failure is one line on stderr and exit code 1 or 2 (``--debug``: the
    traceback too)."""
    try:
        code = app(args=argv, prog_name="lakestream", standalone_mode=False)
        return int(code or EXIT_OK)
    except typer.TyperException as exc:  # click's: a bad flag or argument, or no arguments
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stderr.write(exc.format_message())
            return EXIT_USAGE
        return _fail(exc, exc.exit_code, _usage_line(exc))
    except typer.Abort as exc:
        return _fail(exc, EXIT_FAILED, "interrupted")
    except Exception as exc:
        return _fail(exc, *explain(exc))


def _fail(exc: BaseException, code: int, line: str) -> int:
    if _Run.debug or os.environ.get(DEBUG_ENV, "").lower() in {"1", "true", "yes"}:
        traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
