"""Configuration of the entry points: pydantic-settings, environment prefix ``LAKESTREAM_``.

Only ``jobs/`` reads the environment; the packages below it take explicit arguments.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from catalog.errors import InvalidNameError
from catalog.migrations import DEFAULT_SCHEMA
from catalog.store import check_schema_name


class CatalogSettings(BaseSettings):
    """Where the catalog lives. The DSN may carry a password: it is a secret, never logged."""

    model_config = SettingsConfigDict(env_prefix="LAKESTREAM_", extra="ignore")

    catalog_dsn: SecretStr | None = None
    catalog_schema: str = DEFAULT_SCHEMA
    """The PostgreSQL schema holding the catalog (``LAKESTREAM_CATALOG_SCHEMA``)."""
    warehouse: Path | None = None
    log_level: str = "INFO"

    @field_validator("catalog_schema")
    @classmethod
    def _schema_name(cls, value: str) -> str:
        try:
            return check_schema_name(value)
        except InvalidNameError as exc:
            raise ValueError(f"LAKESTREAM_CATALOG_SCHEMA: {exc}") from None

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError(f"unknown log level {value!r}")
        return value.upper()

    def dsn(self) -> str:
        if self.catalog_dsn is None:
            raise ValueError(
                "no catalog database: set LAKESTREAM_CATALOG_DSN or pass --dsn "
                "(e.g. postgresql://user@host:5432/lakestream)"
            )
        return self.catalog_dsn.get_secret_value()


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
