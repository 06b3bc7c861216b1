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
    *STORAGE_OPTIONS,
)
_BY_LOWER = {name.lower(): name for name in _KNOWN}


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


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check ``options`` (keys in any case, as Spark hands them over) and fill in defaults.

    The DSN is the ``catalog`` option, always: the library reads no environment (only the
    ``lakestream`` entry points in ``jobs/`` do), so a read names the catalog it reads.
    """
    given = _by_name(options)
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
    )


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
    if text is None:
        return None
    try:
        version = int(text.strip())
    except ValueError:
        raise ReadOptionError(VERSION_AS_OF, f"not a table version: {text!r}") from None
    if version < 0:
        raise ReadOptionError(VERSION_AS_OF, f"versions start at 0, not {version}")
    return version


def _timestamp(text: str | None) -> dt.datetime | None:
    """ISO-8601 text; without an offset the time is UTC (the catalog's clock), not local."""
    if text is None:
        return None
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReadOptionError(
            TIMESTAMP_AS_OF, f"not an ISO-8601 time: {text!r} (e.g. 2026-11-22T10:15:00+00:00)"
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
