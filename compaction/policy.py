"""When a table needs compaction: thresholds read from its table properties.

Every threshold is a table property, so one table can be tuned without touching the service:
the coordinator, ``lakestream tables compact`` and the planner read the same values. Sizes
accept plain bytes or a unit (``128MB``, ``64 MiB``, ``1g``); like Paimon's and Flink's memory
sizes, ``KB``/``MB``/``GB``/``TB`` are powers of 1024, the same as ``KiB``/``MiB``/...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from compaction.errors import CompactionError

TARGET_FILE_SIZE = "target-file-size"
SMALL_FILE_RATIO = "compaction.small-file-ratio"
MIN_FILE_NUM = "compaction.min-file-num"
FORCE_AFTER_ROUNDS = "compaction.force-after-rounds"
MAX_SORTED_RUNS = "compaction.max-sorted-runs"
MAX_READ_AMPLIFICATION = "compaction.max-read-amplification"
ENABLED = "compaction.enabled"
RESOLVE = "compaction.resolve"
REWRITE_DELETED_RATIO = "compaction.rewrite-deleted-ratio"
TIER_MIN_FILES = "compaction.tier-min-files"

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}


class InvalidPolicyError(CompactionError, ValueError):
    """A compaction table property holds a value that cannot be used."""

    def __init__(self, *, property: str, value: str, table: str | None, expected: str) -> None:
        where = f" of table {table}" if table else ""
        super().__init__(
            f"table property {property!r}{where} is {value!r}; expected {expected} "
            "(or leave the property out for its default)"
        )
        self.property = property
        self.value = value
        self.table = table
        self.expected = expected


def parse_size(text: str) -> int:
    """Bytes from ``"134217728"``, ``"128MB"``, ``"128 mib"``, ``"1g"``; ValueError otherwise."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(text)
    number, unit = match.group(1), match.group(2)
    power: int = _POWERS[unit.lower()] if unit else 0
    return int(number) << (10 * power)


def _positive_int(text: str) -> int:
    value = int(text.strip())
    if value < 1:
        raise ValueError(text)
    return value


def _ratio(text: str) -> float:
    value = float(text.strip())
    if not 0.0 < value <= 1.0:
        raise ValueError(text)
    return value


def _at_least_two(text: str) -> int:
    value = int(text.strip())
    if value < 2:
        raise ValueError(text)
    return value


def _amplification(text: str) -> float:
    value = float(text.strip())
    if not value >= 1.0:  # also refuses NaN
        raise ValueError(text)
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _size(text: str) -> int:
    value = parse_size(text)
    if value < 1:
        raise ValueError(text)
    return value


#: field name -> (property, parser, what a valid value looks like)
_PROPERTIES: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "target_file_size": (TARGET_FILE_SIZE, _size, "a size such as 134217728 or 128MB"),
    "small_file_ratio": (SMALL_FILE_RATIO, _ratio, "a number in (0, 1]"),
    "min_file_num": (MIN_FILE_NUM, _positive_int, "an integer >= 1"),
    "force_after_rounds": (FORCE_AFTER_ROUNDS, _positive_int, "an integer >= 1"),
    "max_sorted_runs": (MAX_SORTED_RUNS, _positive_int, "an integer >= 1"),
    "max_read_amplification": (MAX_READ_AMPLIFICATION, _amplification, "a number >= 1"),
    "enabled": (ENABLED, _boolean, "true or false"),
    "resolve": (RESOLVE, _boolean, "true or false"),
    "rewrite_deleted_ratio": (REWRITE_DELETED_RATIO, _ratio, "a number in (0, 1]"),
    "tier_min_files": (TIER_MIN_FILES, _at_least_two, "an integer >= 2"),
}


@dataclass(frozen=True)
class CompactionPolicy:
    """Thresholds, all table properties with these defaults (docs/compaction.md documents them)."""

    target_file_size: int = 128 * 1024 * 1024
    """``target-file-size``: bytes a compacted file aims at; ``128MB`` style values work."""
    small_file_ratio: float = 0.7
    """``compaction.small-file-ratio``: append files below ratio x target are small."""
    min_file_num: int = 5
    """``compaction.min-file-num``: an append partition waits for this many small files..."""
    force_after_rounds: int = 10
    """``compaction.force-after-rounds``: ...unless it has waited this many coordinator rounds."""
    max_sorted_runs: int = 5
    """``compaction.max-sorted-runs``: a CDC bucket with this many runs is merged."""
    max_read_amplification: float = 1.5
    """``compaction.max-read-amplification``: or when its rows in runs / estimated live rows
    exceed this (see :func:`compaction.planner.read_amplification`)."""
    enabled: bool = True
    """``compaction.enabled``: false leaves the table alone (the CLI too)."""
    resolve: bool = True
    """``compaction.resolve``: a CDC bucket with pending runs and no fold due is resolved
    (kind ``resolve``: deletion vectors mark what the runs replace; no data rewritten).
    With it on, a bucket is folded whole only for what a reader pays: its pending runs."""
    rewrite_deleted_ratio: float = 0.2
    """``compaction.rewrite-deleted-ratio``: a file whose deletion vector marks more than this
    fraction of its rows is rewritten without them (design D8, tier 2): an append file small or
    not; a resolved CDC file at or above the small-file size (smaller ones are tier 1's)."""
    tier_min_files: int = 4
    """``compaction.tier-min-files``: a resolved CDC bucket folds this many consecutive small
    resolved files into one (design D8, tier 1; kind ``fold-resolved``)."""

    @property
    def small_file_bytes(self) -> float:
        """Files below this size are small (small_file_ratio x target_file_size)."""
        return self.target_file_size * self.small_file_ratio

    def is_small(self, size_bytes: int) -> bool:
        """Whether a file of this size is small (below :attr:`small_file_bytes`)."""
        return size_bytes < self.small_file_bytes

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], *, table: str | None = None
    ) -> CompactionPolicy:
        """The policy a table's properties give; a bad value raises :class:`InvalidPolicyError`
        naming the property and the table (``table`` is only used in that message)."""
        values: dict[str, Any] = {}
        for spec in fields(cls):
            prop, parse, expected = _PROPERTIES[spec.name]
            if prop not in properties:
                continue
            raw = properties[prop]
            try:
                values[spec.name] = parse(str(raw))
            except ValueError as exc:
                raise InvalidPolicyError(
                    property=prop, value=str(raw), table=table, expected=expected
                ) from exc
        return cls(**values)
