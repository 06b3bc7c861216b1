"""Options of the ``lakestream`` batch reader, parsed and checked once at ``load()``.

``versionAsOf`` and ``timestampAsOf`` carry Delta Lake's names, so a job can move between the two
formats by changing the format name. Unknown options are refused: a misspelt ``versionAsof``
would otherwise silently read the latest version.

The catalog DSN may hold a password: it is kept as a :class:`~pydantic.SecretStr`, never logged,
never put in a message, and never shipped to the executors (they do not connect to the catalog).
The ``storage.*`` options (an object-store warehouse) do go to the executors - they read the
files - as :class:`catalog.StorageOptions`, whose keys are secrets too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr, ValidationError

from catalog import DEFAULT_SCHEMA, InvalidNameError, StorageOptions, check_schema_name
from catalog.files import DEFAULT_STORAGE
from ingest.spark_read.errors import ReadOptionError

TABLE = "table"
PATH = "path"  # load("shop.orders") is load() with option path
CATALOG = "catalog"
CATALOG_SCHEMA = "catalogSchema"
VERSION_AS_OF = "versionAsOf"
TIMESTAMP_AS_OF = "timestampAsOf"
MAX_SPLIT_BYTES = "maxSplitBytes"
# Change reads (Delta's Change Data Feed names): a batch read with a starting point, and streams.
READ_CHANGE_FEED = "readChangeFeed"
STARTING_VERSION = "startingVersion"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_VERSION = "endingVersion"
MAX_VERSIONS_PER_TRIGGER = "maxVersionsPerTrigger"
MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
CONSUMER_ID = "consumerId"
#: ``startingVersion`` of a stream that wants only changes committed after it starts.
LATEST = "latest"
_BATCH_ONLY = (VERSION_AS_OF, TIMESTAMP_AS_OF, MAX_SPLIT_BYTES, ENDING_VERSION)
_STREAM_ONLY = (MAX_VERSIONS_PER_TRIGGER, MAX_ROWS_PER_TRIGGER, CONSUMER_ID)
#: Options that make a read a change read (so its schema has the change columns).
_CHANGE_MARKERS = (READ_CHANGE_FEED, STARTING_VERSION, STARTING_TIMESTAMP, *_STREAM_ONLY)
#: How executors reach an object-store warehouse (``catalog.StorageOptions``), one option each.
#: The secret ones match Spark's default ``spark.redaction.regex`` (secret|token|access.key),
#: so Spark masks them in plans and its UI as well.
STORAGE_OPTIONS = {
    "storage.region": "region",
    "storage.endpoint": "endpoint",
    "storage.pathStyle": "path_style",
    "storage.accessKey": "access_key",
    "storage.secretKey": "secret_key",
    "storage.sessionToken": "session_token",
    "storage.anonymous": "anonymous",
}

#: Largest plain-file group one Spark task reads, like ``spark.sql.files.maxPartitionBytes``.
DEFAULT_MAX_SPLIT_BYTES = 128 * 1024 * 1024

_KNOWN = (
    TABLE,
    PATH,
    CATALOG,
    CATALOG_SCHEMA,
    VERSION_AS_OF,
    TIMESTAMP_AS_OF,
    MAX_SPLIT_BYTES,
    READ_CHANGE_FEED,
    STARTING_VERSION,
    STARTING_TIMESTAMP,
    ENDING_VERSION,
    MAX_VERSIONS_PER_TRIGGER,
    MAX_ROWS_PER_TRIGGER,
    CONSUMER_ID,
    *STORAGE_OPTIONS,
)
_BY_LOWER = {name.lower(): name for name in _KNOWN}


@dataclass(frozen=True)
class ChangeOptions:
    """Where a change read starts and, for a stream, how much each micro-batch takes.

    No starting point (a stream's default): the table as it is when the stream starts, as
    inserts, then every change after it. ``start_version`` ``None`` with ``latest``: only
    changes committed after the stream starts."""

    start_version: int | None = None
    start_time: dt.datetime | None = None
    latest: bool = False
    end_version: int | None = None
    max_versions: int | None = None
    max_rows: int | None = None
    """Soft: a micro-batch takes versions while the rows they added stay within it, and at
    least one version."""
    consumer_id: str | None = None

    @property
    def snapshot_first(self) -> bool:
        return self.start_version is None and self.start_time is None and not self.latest


@dataclass(frozen=True)
class ReadOptions:
    """What a read asks for; ``version`` and ``as_of`` are never both set."""

    table: str
    dsn: SecretStr = field(repr=False)
    version: int | None = None
    as_of: dt.datetime | None = None
    max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES
    catalog_schema: str = DEFAULT_SCHEMA
    #: Travels to the executors inside each input partition (they read the files); its keys
    #: are ``SecretStr``, masked wherever the options are shown.
    storage: StorageOptions = field(default=DEFAULT_STORAGE, repr=False)
    changes: ChangeOptions | None = None
    """Set for a change read (a stream always; a batch read with a starting point)."""


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check ``options`` (keys in any case, as Spark hands them over) and fill in defaults.

    The DSN is the ``catalog`` option, always: the library reads no environment (only the
    ``lakestream`` entry points in ``jobs/`` do), so a read names the catalog it reads.
    """
    given = _by_name(options)
    _refuse(given, _STREAM_ONLY, "applies to spark.readStream only")
    changes = _batch_changes(given)
    if changes is not None:
        _refuse(given, (VERSION_AS_OF, TIMESTAMP_AS_OF), "a change read takes startingVersion")
    version = _version(given.get(VERSION_AS_OF))
    as_of = _timestamp(given.get(TIMESTAMP_AS_OF))
    if version is not None and as_of is not None:
        raise ReadOptionError(VERSION_AS_OF, f"give {VERSION_AS_OF} or {TIMESTAMP_AS_OF}, not both")
    return ReadOptions(
        table=_table(given),
        dsn=_dsn(given),
        version=version,
        as_of=as_of,
        max_split_bytes=_positive(MAX_SPLIT_BYTES, given.get(MAX_SPLIT_BYTES))
        or DEFAULT_MAX_SPLIT_BYTES,
        catalog_schema=_schema(given),
        storage=_storage(given),
        changes=changes,
    )


def is_change_read(options: Mapping[str, str]) -> bool:
    """Whether the options ask for changes rather than rows (``readChangeFeed`` not false).

    Spark asks a Python source for its schema before it says whether the read is a batch or
    a stream, so the options alone must tell the two schemas apart: a stream names
    ``readChangeFeed`` (or a starting point, a rate limit, a consumer), as in Delta."""
    given = _by_name(options)
    if given.get(READ_CHANGE_FEED, "").strip().lower() == "false":
        return False
    return any(name in given for name in _CHANGE_MARKERS)


def check_change_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a change read's options at ``load()``, before Spark says batch or stream: as a
    stream's unless a batch-only option is given (an action re-checks a batch read whole)."""
    given = _by_name(options)
    if any(o in given for o in _BATCH_ONLY) and not any(o in given for o in _STREAM_ONLY):
        return parse_options(options)
    return parse_stream_options(options)


def parse_stream_options(options: Mapping[str, str]) -> ReadOptions:
    """The options of ``spark.readStream.format("lakestream")``: a stream of the table's
    changes (see :class:`ChangeOptions`)."""
    given = _by_name(options)
    _refuse(given, _BATCH_ONLY, "applies to batch reads (spark.read) only")
    if not is_change_read(options):
        raise ReadOptionError(
            READ_CHANGE_FEED,
            "a lakestream stream reads the table's changes: add .option('readChangeFeed', "
            "'true') (Spark asks for the schema before it says the read is a stream)",
        )
    return ReadOptions(
        table=_table(given),
        dsn=_dsn(given),
        catalog_schema=_schema(given),
        storage=_storage(given),
        changes=ChangeOptions(
            **_starting(given),
            max_versions=_positive(MAX_VERSIONS_PER_TRIGGER, given.get(MAX_VERSIONS_PER_TRIGGER)),
            max_rows=_positive(MAX_ROWS_PER_TRIGGER, given.get(MAX_ROWS_PER_TRIGGER)),
            consumer_id=_consumer_id(given.get(CONSUMER_ID)),
        ),
    )


def _batch_changes(given: Mapping[str, str]) -> ChangeOptions | None:
    """A batch change read, when ``readChangeFeed`` or a starting point asks for one."""
    flag = given.get(READ_CHANGE_FEED, "").strip().lower()
    if flag not in ("", "true", "false"):
        raise ReadOptionError(READ_CHANGE_FEED, f"true or false, not {given[READ_CHANGE_FEED]!r}")
    starting = _starting(given)
    wants = flag == "true" or any(starting.values()) or STARTING_VERSION in given
    if not wants:
        if ENDING_VERSION in given:
            raise ReadOptionError(ENDING_VERSION, "a change read needs startingVersion too")
        return None
    if flag == "false":
        raise ReadOptionError(READ_CHANGE_FEED, "false, yet a starting point was given")
    if starting["latest"] or (starting["start_version"] is None and starting["start_time"] is None):
        raise ReadOptionError(
            STARTING_VERSION, "a batch change read needs a version number or startingTimestamp"
        )
    end = given.get(ENDING_VERSION)
    return ChangeOptions(
        **starting, end_version=None if end is None else _number(ENDING_VERSION, end)
    )


def _starting(given: Mapping[str, str]) -> dict[str, Any]:
    text = given.get(STARTING_VERSION)
    at = _timestamp(given.get(STARTING_TIMESTAMP), STARTING_TIMESTAMP)
    if text is not None and at is not None:
        raise ReadOptionError(
            STARTING_VERSION, f"give {STARTING_VERSION} or {STARTING_TIMESTAMP}, not both"
        )
    latest = text is not None and text.strip().lower() == LATEST
    version = None if text is None or latest else _number(STARTING_VERSION, text)
    return {"start_version": version, "start_time": at, "latest": latest}


def _refuse(given: Mapping[str, str], options: tuple[str, ...], why: str) -> None:
    for option in options:
        if option in given:
            raise ReadOptionError(option, why)


def _consumer_id(text: str | None) -> str | None:
    if text is None:
        return None
    name = text.strip()
    if not name or len(name) > 200:
        raise ReadOptionError(CONSUMER_ID, "1 to 200 characters, e.g. 'orders-to-search'")
    return name


def _storage(given: Mapping[str, str]) -> StorageOptions:
    """The ``storage.*`` options; none given: the store's standard credential chain."""
    values = {STORAGE_OPTIONS[k]: v for k, v in given.items() if k in STORAGE_OPTIONS}
    if not values:
        return DEFAULT_STORAGE
    try:
        return StorageOptions.model_validate(values)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field_name = str(error["loc"][0]) if error["loc"] else ""
        option = next((k for k, v in STORAGE_OPTIONS.items() if v == field_name), "storage")
        raise ReadOptionError(option, error["msg"]) from None


def _schema(given: Mapping[str, str]) -> str:
    schema = given.get(CATALOG_SCHEMA) or DEFAULT_SCHEMA
    try:
        return check_schema_name(schema.strip())
    except InvalidNameError as exc:
        raise ReadOptionError(CATALOG_SCHEMA, str(exc)) from None


def _by_name(options: Mapping[str, str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if name is None:
            known = ", ".join(n for n in _KNOWN if n != PATH)
            raise ReadOptionError(key, f"unknown option (known: {known})")
        given[name] = value
    return given


def _table(given: Mapping[str, str]) -> str:
    table, path = given.get(TABLE, "").strip(), given.get(PATH, "").strip()
    if table and path and table.lower() != path.lower():
        raise ReadOptionError(TABLE, f"load({path!r}) names another table than option table")
    name = table or path
    if not name:
        raise ReadOptionError(TABLE, "required: the table to read, e.g. 'shop.orders'")
    return name


def _dsn(given: Mapping[str, str]) -> SecretStr:
    dsn = given.get(CATALOG)
    if not dsn:
        raise ReadOptionError(
            CATALOG,
            "required: the catalog's PostgreSQL DSN, e.g. .option('catalog', "
            "os.environ['LAKESTREAM_CATALOG_DSN'])",
        )
    return SecretStr(dsn)


def _version(text: str | None) -> int | None:
    return None if text is None else _number(VERSION_AS_OF, text)


def _number(option: str, text: str) -> int:
    try:
        version = int(text.strip())
    except ValueError:
        raise ReadOptionError(option, f"not a table version: {text!r}") from None
    if version < 0:
        raise ReadOptionError(option, f"versions start at 0, not {version}")
    return version


def _timestamp(text: str | None, option: str = TIMESTAMP_AS_OF) -> dt.datetime | None:
    """ISO-8601 text; without an offset the time is UTC (the catalog's clock), not local."""
    if text is None:
        return None
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReadOptionError(
            option, f"not an ISO-8601 time: {text!r} (e.g. 2026-11-22T10:15:00+00:00)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def _positive(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ReadOptionError(option, f"not a whole number: {text!r}") from None
    if value <= 0:
        raise ReadOptionError(option, f"must be positive, not {value}")
    return value
