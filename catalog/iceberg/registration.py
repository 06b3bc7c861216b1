"""pyiceberg's SQL catalog on the catalog's own PostgreSQL, where engines look tables up.

pyiceberg's ``SqlCatalog`` speaks SQLAlchemy; psycopg 3 (lakestream's driver) is SQLAlchemy's
``postgresql+psycopg`` dialect, so no second driver is needed. Its tables
(``iceberg_tables``, ``iceberg_namespace_properties``) go where the connection's
``search_path`` puts them (``public`` by default), apart from lakestream's own schema. A user
loads a table with::

    SqlCatalog("lakestream", uri="postgresql+psycopg://user@host/db").load_table("shop.orders")
"""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine import URL

#: The catalog name exported tables are registered under (``iceberg_tables.catalog_name``).
SQL_CATALOG_NAME = "lakestream"


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN (URL or ``key=value`` form) as the SQLAlchemy URL of psycopg 3."""
    from psycopg.conninfo import conninfo_to_dict

    parts = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    port = parts.pop("port", None)
    url = URL.create(
        "postgresql+psycopg",
        username=parts.pop("user", None),
        password=parts.pop("password", None),
        host=parts.pop("host", None),
        port=int(port) if port else None,
        database=parts.pop("dbname", None),
        query=parts,
    )
    return url.render_as_string(hide_password=False)


def sql_catalog(dsn: str, name: str = SQL_CATALOG_NAME) -> SqlCatalog:
    """pyiceberg's SQL catalog in the database of ``dsn`` (its tables are made on first use)."""
    return SqlCatalog(name, uri=sqlalchemy_url(dsn))
