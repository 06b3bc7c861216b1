"""The systems under test, by name; each module is imported only by the processes that run it."""

from __future__ import annotations

import importlib

from harness import System

#: Run order within a mode: lakestream first, then the peers.
SYSTEM_NAMES = ("lakestream", "pyiceberg", "deltalake")

_MODULES = {
    "lakestream": "sys_lakestream",
    "pyiceberg": "sys_iceberg",
    "deltalake": "sys_delta",
}


def get_system(name: str) -> System:
    module = importlib.import_module(_MODULES[name])
    system: System = module.SYSTEM
    return system
