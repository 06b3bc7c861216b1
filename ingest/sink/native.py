"""The C extension of ``transactions: consistent`` (``_holdscan.c``: the tasks' per-event hold,
the driver's END markers), loaded only when it was built from the source beside it.

Each loop it holds has a Python reference that runs where it is not loaded; the tests check
them against each other. A build older than its source (``_holdscan.c`` edited, the package not
installed again) is never used: the C loops must be the ones the tests checked."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType


def load() -> tuple[ModuleType | None, str]:
    """The extension, or None; and "native", or "python: <why not>"."""
    try:
        from ingest.sink import _holdscan
    except ImportError:
        return None, "python: the C extension is not built (no C compiler at install time)"
    source = Path(__file__).with_name("_holdscan.c")
    built_from = _holdscan.SOURCE_SHA256
    if source.exists() and hashlib.sha256(source.read_bytes()).hexdigest() != built_from:
        return None, "python: the C extension is older than _holdscan.c (run dev/setup)"
    return _holdscan, "native"


#: The loaded extension (None: the Python loops run) and why: "native" or "python: <why>".
EXTENSION, LOOPS = load()
