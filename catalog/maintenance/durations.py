"""Durations as users write them in table properties and flags: ``7d``, ``1h``, ``30m``, ``45s``.

One small grammar for every maintenance setting, so ``snapshot.time-retained=7d`` and
``lakestream tables expire --older-than 7d`` mean the same thing.
"""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> dt.timedelta:
    """``'7d'`` -> 7 days. Units: s, m, h, d, w; a plain ``0`` is zero. Raises ValueError."""
    if text.strip() == "0":
        return dt.timedelta(0)
    match = _PATTERN.match(text.lower())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit, e.g. 30s, 15m, 1h, 7d, 2w"
        )
    return dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def format_duration(value: dt.timedelta) -> str:
    """The shortest exact text :func:`parse_duration` reads back (``604800 s`` -> ``1w``)."""
    seconds = value.total_seconds()
    if seconds == 0:
        return "0"
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"
