"""Iceberg v2 metadata over a lakestream table's Parquet files, for engines that never heard of
lakestream (issue 51). Needs the ``iceberg`` extra (pyiceberg); nothing else in ``catalog``
imports this package, so tables without Iceberg metadata never load pyiceberg.

:func:`export_table` writes the metadata in ``<location>/metadata/`` and records its location
in the catalog (``iceberg_metadata``); :mod:`catalog.iceberg.schema` says how field ids,
partitions and hash buckets map; :mod:`catalog.iceberg.export` what a snapshot is.
"""

from catalog.iceberg.export import (
    CONSUMER_ID,
    ICEBERG_METADATA_PROPERTY,
    LAG_PROPERTY,
    VERSION_SUMMARY,
    IcebergExport,
    IcebergRegistrationError,
    export_table,
)
from catalog.iceberg.pointer import PointerCatalog
from catalog.iceberg.registration import sql_catalog

__all__ = [
    "CONSUMER_ID",
    "ICEBERG_METADATA_PROPERTY",
    "LAG_PROPERTY",
    "VERSION_SUMMARY",
    "IcebergExport",
    "IcebergRegistrationError",
    "PointerCatalog",
    "export_table",
    "sql_catalog",
]
