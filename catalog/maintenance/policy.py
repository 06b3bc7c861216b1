"""The maintenance settings of a table, read from its properties with their defaults.

* ``snapshot.retain-last`` (100): expiry always keeps at least this many newest versions;
* ``snapshot.time-retained`` (7d): ...and every version a read at a time inside this window needs;
* ``partition.ttl`` (none): partitions whose date/timestamp value is older are dropped;
* ``partition.ttl-column`` (the first date/timestamp range column): the column TTL reads;
* ``vacuum.older-than`` (1h): vacuum deletes only files (and cleanup entries) older than this;
* ``maintenance.enabled`` (true): ``false`` makes the compactor's maintenance loop skip the table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from catalog.errors import MaintenanceConfigError
from catalog.maintenance.durations import parse_duration
from catalog.meta import TableMeta

RETAIN_LAST = "snapshot.retain-last"
TIME_RETAINED = "snapshot.time-retained"
PARTITION_TTL = "partition.ttl"
TTL_COLUMN = "partition.ttl-column"
VACUUM_OLDER_THAN = "vacuum.older-than"
MAINTENANCE_ENABLED = "maintenance.enabled"

DEFAULT_RETAIN_LAST = 100
DEFAULT_TIME_RETAINED = dt.timedelta(days=7)
DEFAULT_VACUUM_OLDER_THAN = dt.timedelta(hours=1)


@dataclass(frozen=True)
class MaintenancePolicy:
    retain_last: int = DEFAULT_RETAIN_LAST
    time_retained: dt.timedelta = DEFAULT_TIME_RETAINED
    partition_ttl: dt.timedelta | None = None
    ttl_column: str | None = None
    vacuum_older_than: dt.timedelta = DEFAULT_VACUUM_OLDER_THAN
    enabled: bool = True

    @classmethod
    def of(cls, meta: TableMeta) -> MaintenancePolicy:
        """The table's policy; a bad value raises MaintenanceConfigError naming the property."""
        props = meta.properties
        table = str(meta.name)
        ttl = _duration(props, PARTITION_TTL, None, table)
        return cls(
            retain_last=check_retain_last(
                _int(props, RETAIN_LAST, DEFAULT_RETAIN_LAST, table), table, RETAIN_LAST
            ),
            time_retained=_required(props, TIME_RETAINED, DEFAULT_TIME_RETAINED, table),
            partition_ttl=ttl,
            ttl_column=ttl_column(meta) if ttl is not None else None,
            vacuum_older_than=_duration(props, VACUUM_OLDER_THAN, DEFAULT_VACUUM_OLDER_THAN, table)
            or dt.timedelta(0),
            enabled=_bool(props, MAINTENANCE_ENABLED, table),
        )


def check_retain_last(value: int, table: str | None, setting: str) -> int:
    if value < 1:
        raise MaintenanceConfigError(
            f"{setting} must be at least 1 (the latest version is never expired), got {value}",
            table=table,
            setting=setting,
        )
    return value


def ttl_column(meta: TableMeta) -> str:
    """The range partition column ``partition.ttl`` applies to (a date or timestamp column)."""
    table = str(meta.name)
    named = meta.properties.get(TTL_COLUMN)
    candidates = [named] if named else list(meta.spec.columns)
    for column in candidates:
        if column not in meta.spec.columns:
            raise MaintenanceConfigError(
                f"{TTL_COLUMN}={column!r}: {table} is not range-partitioned by {column!r} "
                f"(its partition columns: {', '.join(meta.spec.columns) or 'none'})",
                table=table,
                setting=TTL_COLUMN,
            )
        kind = meta.schema.field(column).type
        if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
            return column
        if named:
            raise MaintenanceConfigError(
                f"{TTL_COLUMN}={column!r}: partition.ttl needs a date or timestamp column, "
                f"{column!r} is {kind}",
                table=table,
                setting=TTL_COLUMN,
            )
    raise MaintenanceConfigError(
        f"{PARTITION_TTL} is set but {table} has no date or timestamp range partition column; "
        f"partition it by one or remove the property",
        table=table,
        setting=PARTITION_TTL,
    )


def _duration(
    props: Mapping[str, str], key: str, default: dt.timedelta | None, table: str
) -> dt.timedelta | None:
    text = props.get(key)
    if text is None:
        return default
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise MaintenanceConfigError(
            f"table {table}: {key}: {exc}", table=table, setting=key
        ) from None


def _required(
    props: Mapping[str, str], key: str, default: dt.timedelta, table: str
) -> dt.timedelta:
    found = _duration(props, key, default, table)
    return default if found is None else found


def _int(props: Mapping[str, str], key: str, default: int, table: str) -> int:
    text = props.get(key)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise MaintenanceConfigError(
            f"table {table}: {key} must be a whole number, got {text!r}", table=table, setting=key
        ) from None


def _bool(props: Mapping[str, str], key: str, table: str) -> bool:
    text = props.get(key, "true").strip().lower()
    if text not in ("true", "false"):
        raise MaintenanceConfigError(
            f"table {table}: {key} must be true or false, got {text!r}", table=table, setting=key
        )
    return text == "true"
