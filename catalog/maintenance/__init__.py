"""Table maintenance: snapshot expiry, vacuum (file cleanup) and partition TTL.

Engine-independent like the rest of ``catalog``; the compactor service runs them on a schedule
and ``lakestream tables expire|vacuum|ttl`` runs them by hand. ``Table.expire_versions``,
``Table.vacuum`` and ``Table.drop_expired_partitions`` are the entry points.
"""

from catalog.maintenance.durations import format_duration, parse_duration
from catalog.maintenance.expiry import ExpiryReport
from catalog.maintenance.policy import MaintenancePolicy
from catalog.maintenance.ttl import TtlReport
from catalog.maintenance.vacuum import VacuumReport

__all__ = [
    "ExpiryReport",
    "MaintenancePolicy",
    "TtlReport",
    "VacuumReport",
    "format_duration",
    "parse_duration",
]
