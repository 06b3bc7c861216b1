"""Configuration of the entry points: one pydantic-settings model per command.

Only ``jobs/`` reads the environment; the packages below it take explicit arguments.

Every command's model derives from :class:`CommandSettings` (the catalog and the log level);
a command with keys of its own (``ingest``, ``compactor``) adds them. The sources of a model,
the first one that gives a key winning:

1. flags of the command (``--dsn``, ``--workers``, ...);
2. the environment, one prefix ``LAKESTREAM_`` and ``__`` between nested keys: the shared keys
   as ``LAKESTREAM_CATALOG__DSN``, ``LAKESTREAM_CATALOG__WAREHOUSE``, ``LAKESTREAM_LOG_LEVEL``, a
   command's own keys under its name, ``LAKESTREAM_INGEST__KAFKA__BOOTSTRAP_SERVERS``,
   ``LAKESTREAM_COMPACTOR__WORKERS``;
3. the older names, still read: ``LAKESTREAM_CATALOG_DSN``, ``LAKESTREAM_WAREHOUSE``,
   ``LAKESTREAM_INGEST_<KEY>``, ``LAKESTREAM_COMPACTOR_<KEY>``;
4. the YAML file of the command (``lakestream ingest --config``);
5. the defaults.

The environment overrides the file so that a deployment (a systemd unit, a container) changes
one value - a password, a broker address - without editing a file shared by all of them.
A model is validated whole before the command starts anything; what is wrong becomes one
:class:`ConfigError` line naming the key, the file and the environment variable.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from catalog import (
    DEFAULT_SCHEMA,
    InvalidNameError,
    StorageError,
    StorageOptions,
    check_schema_name,
)
from catalog.files.storage import normalize_warehouse
from catalog.outage import DEFAULT_OUTAGE_BUDGET_S

ENV_PREFIX = "LAKESTREAM_"
NESTED = "__"
DSN_EXAMPLE = "postgresql://user@host:5432/lakestream"


class ConfigError(Exception):
    """A configuration a command cannot start with; the message is the one line shown.

    The ``lakestream`` command exits with code 2 on it.
    """


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"

    @classmethod
    def _missing_(cls, value: object) -> LogLevel | None:
        """``info`` and ``Info`` are ``INFO``: levels are written in any case."""
        if isinstance(value, str):
            return cls.__members__.get(value.upper())
        return None


def check_dsn(dsn: str) -> str:
    """``dsn`` if libpq can parse it, checked without connecting: a typo fails at once
    instead of being retried as an unreachable database.

    The parser's own message is not passed on: it quotes the DSN, password included.
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except ProgrammingError:
        raise ValueError(
            f"not a PostgreSQL connection string; write it as {DSN_EXAMPLE} "
            "or 'host=... dbname=... user=...'"
        ) from None
    if not dsn.strip():
        raise ValueError(f"empty; write it as {DSN_EXAMPLE}")
    return dsn


def redact_dsn(dsn: str) -> str:
    """A DSN fit for logs and messages: the password replaced."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN is shown as nothing at all
        return "<unparsable dsn>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


class Section(BaseModel):
    """A nested section of a command's settings: unknown keys are refused, not ignored."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class CatalogSettings(Section):
    """Where the catalog lives. The DSN may carry a password: it is a secret, never logged."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, populate_by_name=True)

    dsn: SecretStr | None = None
    warehouse: str | None = None
    """A local path or an object-store URI (``s3://bucket/prefix``, ``gs://``, ``abfs://``,
    ``hdfs://``); how to reach the store is ``storage``."""
    storage: StorageOptions = Field(default_factory=StorageOptions)
    """Region, endpoint, path-style and keys of the warehouse's store
    (``LAKESTREAM_CATALOG__STORAGE__ENDPOINT`` ...). Unset keys: the store's standard credential
    chain. Keys are secrets: never logged, never stored in the catalog."""
    db_schema: str = Field(default=DEFAULT_SCHEMA, alias="schema")
    """The PostgreSQL schema holding the catalog (``schema:`` in the file,
    ``LAKESTREAM_CATALOG__SCHEMA``, ``--schema``)."""
    outage_budget: float = Field(default=DEFAULT_OUTAGE_BUDGET_S, ge=0)
    """Seconds the ingest job waits out a catalog outage before it stops (exit code 1); 0: stop
    at the first failed catalog call. Here, not in the ingest section, because it is a key of
    ``catalog:`` in the job's file; the compactor has its own (``compactor.outage_budget``)."""

    @field_validator("db_schema")
    @classmethod
    def _schema_name(cls, value: str) -> str:
        try:
            return check_schema_name(value)
        except InvalidNameError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("warehouse", mode="before")
    @classmethod
    def _usable_warehouse(cls, value: object) -> object:
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, str) and "://" in value:
            try:
                return normalize_warehouse(value)
            except StorageError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("dsn")
    @classmethod
    def _parsable(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_dsn(value.get_secret_value())
        return value

    def required_dsn(self) -> str:
        """The DSN, or a :class:`ConfigError` saying how to give one."""
        if self.dsn is None:
            raise ConfigError(
                f"no catalog database: set {ENV_PREFIX}CATALOG__DSN (or {ENV_PREFIX}CATALOG_DSN) "
                f"or pass --dsn, e.g. {DSN_EXAMPLE}"
            )
        return self.dsn.get_secret_value()


#: The YAML file the model being built reads (see :meth:`CommandSettings.from_file`).
_FILE: ContextVar[Path | None] = ContextVar("lakestream_settings_file", default=None)


class CommandSettings(BaseSettings):
    """The settings of a command that opens the catalog; the base of every command's model."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED,
        extra="forbid",
        hide_input_in_errors=True,
    )
    #: The command's name: its own keys are read from ``LAKESTREAM_<COMMAND>__<KEY>``.
    command: ClassVar[str | None] = None

    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    log_level: LogLevel = LogLevel.INFO

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        shared = frozenset(CommandSettings.model_fields)
        own = frozenset(settings_cls.model_fields) - shared
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            _EnvSection(settings_cls, ENV_PREFIX, shared),
        ]
        if cls.command is not None:
            prefix = f"{ENV_PREFIX}{cls.command.upper()}"
            sources.append(_EnvSection(settings_cls, prefix + NESTED, own))
            sources.append(_EnvSection(settings_cls, prefix + "_", own | {"catalog"}))
        sources += [_OldCatalogNames(settings_cls), _YamlFile(settings_cls)]
        return tuple(sources)

    @classmethod
    def from_file(cls, path: Path) -> Any:
        """The settings with ``path`` (YAML) as the source below the environment.

        Raises:
            ConfigError: the file is missing or not YAML, or a key is unknown or invalid.
        """
        if not path.is_file():
            raise ConfigError(f"{path}: no such file; pass the path of the YAML configuration")
        token = _FILE.set(path)
        try:
            with config_errors(cls, path):
                return cls()
        finally:
            _FILE.reset(token)

    def notes(self) -> list[str]:
        """Warnings about the configuration (old key names), logged once logging is set up."""
        return []


@contextmanager
def config_errors(model: type[BaseModel], path: Path | None = None) -> Iterator[None]:
    """Turn a :class:`ValidationError` of ``model`` into one :class:`ConfigError` line."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, model, path)) from exc


def describe_errors(exc: ValidationError, model: type[BaseModel], path: Path | None) -> str:
    """One line: each wrong key with what was expected, where it is set, what to write."""
    problems = [_problem(error, model, path) for error in exc.errors(include_url=False)]
    where = f"{path}: " if path is not None else ""
    return where + "; ".join(problems)


def _problem(error: ErrorDetails, model: type[BaseModel], path: Path | None) -> str:
    loc = [str(part) for part in error["loc"]]
    key, kind, msg = ".".join(loc), error["type"], error["msg"]
    command = getattr(model, "command", None)
    if kind == "extra_forbidden":
        known = known_keys(model, loc[:-1])
        hint = f" (known keys here: {', '.join(known)})" if known else ""
        return f"unknown key {key!r}{hint}"
    where = f"the file or {env_name(loc, command)}" if path else env_name(loc, command)
    if kind == "missing":
        return f"{key} is missing: set it in {where}"
    return f"{key}: {msg.removeprefix('Value error, ')} (fix it in {where})"


def env_name(loc: list[str], command: str | None) -> str:
    """The environment variable that sets the key at ``loc``."""
    shared = loc[0] in CommandSettings.model_fields if loc else True
    scope = "" if shared or command is None else f"{command.upper()}{NESTED}"
    return ENV_PREFIX + scope + NESTED.join(part.upper() for part in loc)


def known_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """The keys a section at ``loc`` accepts (none when it cannot be told)."""
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is not None:
            field = fields.get(part)
            current = None if field is None else _model_of(field.annotation)
        elif current is not None and _is_mapping(current):
            current = _model_of(current.__args__[1])  # a name in a dict of sections
        if current is None:
            return []
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields is not None else []


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if _is_mapping(annotation):
        return annotation
    return None


def _is_mapping(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", None)
    return origin is dict and isinstance(getattr(annotation, "__args__", [None, None])[1], type)


class _EnvSection(EnvSettingsSource):
    """The environment variables of some of the model's keys, under one prefix."""

    def __init__(self, settings_cls: type[BaseSettings], prefix: str, keys: frozenset[str]):
        super().__init__(
            settings_cls, env_prefix=prefix, env_nested_delimiter=NESTED, case_sensitive=False
        )
        self._keys = keys

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in super().__call__().items() if k in self._keys}


class _OldCatalogNames(PydanticBaseSettingsSource):
    """``LAKESTREAM_CATALOG_DSN`` and ``LAKESTREAM_WAREHOUSE``, the names before sections."""

    NAMES: ClassVar[Mapping[str, str]] = {
        f"{ENV_PREFIX}CATALOG_DSN": "dsn",
        f"{ENV_PREFIX}WAREHOUSE": "warehouse",
        f"{ENV_PREFIX}CATALOG_SCHEMA": "schema",
    }

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ does the work

    def __call__(self) -> dict[str, Any]:
        found = {key: os.environ[name] for name, key in self.NAMES.items() if os.environ.get(name)}
        return {"catalog": found} if found else {}


class _YamlFile(PydanticBaseSettingsSource):
    """The YAML file :meth:`CommandSettings.from_file` is reading (nothing otherwise)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ does the work

    def __call__(self) -> dict[str, Any]:
        path = _FILE.get()
        return {} if path is None else read_yaml(path)


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in ``path``, or a :class:`ConfigError` naming the line that is wrong."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}{line}: {problem}; fix the YAML syntax there") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the file must be a mapping of keys (job: ..., catalog: ...)")
    return data
