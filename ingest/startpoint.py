"""Where the first batch of a checkpoint starts: one rule that holds across every crash.

Spark keeps two logs in a checkpoint: ``offsets/N`` (batch N was planned, with its end offsets)
and ``commits/N`` (batch N finished). Once the commit log holds a batch, Spark's logs alone say
where the next batch starts. Before that, Spark asks the source's ``initialOffset()`` for batch
0's start - on the first start *and again on every restart that replays batch 0*. If that answer
changed between the two calls (``latest`` moved on, or the job fell back from the catalog's
offsets to the configured ``earliest``), the replayed batch 0 read a different range than the
one that crashed: messages were skipped or read twice.

The rule, therefore:

* while the commit log holds no batch, batch 0 starts at the offsets saved in
  ``<checkpoint>/lakestream-start.json``;
* those offsets are decided once, before the query starts, and saved (atomically, fsynced):
  the offsets the catalog stores for the job, when it stores any and its tables still live;
  otherwise the configured ``starting_offsets`` resolved to numbers against the broker;
* they are decided anew only while Spark has planned no batch (the offset log is empty), because
  only then can no batch depend on them - and even then a configured start that was already
  resolved is kept, so ``latest`` means "where the job first started", not "where it restarted".

A lost checkpoint takes the saved start with it, and the job then starts at the catalog's
offsets again: the catalog, not Spark, is the record of what was committed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ingest.kafka.offsets import OffsetsJson

START_FILE = "lakestream-start.json"
INCARNATION_FILE = "lakestream-incarnation"


class StartOrigin(StrEnum):
    CHECKPOINT = "checkpoint"
    """A batch finished in this checkpoint: Spark's offset and commit logs decide."""
    SAVED = "saved"
    """Batch 0 was planned from the saved start and never finished: replan it from there."""
    CATALOG = "catalog"
    """The offsets stored with the job's last catalog commit."""
    CONFIG = "config"
    """The configured ``starting_offsets``, resolved to numbers when first needed."""


@dataclass(frozen=True)
class CheckpointState:
    """What Spark's checkpoint holds, as far as the start of batch 0 is concerned."""

    planned: bool
    """``offsets/`` names a batch."""
    finished: bool
    """``commits/`` names a batch."""
    saved: SavedStart | None


@dataclass(frozen=True)
class SavedStart:
    offsets: OffsetsJson
    origin: StartOrigin
    config: str
    """The configured ``starting_offsets`` when these were decided."""

    def to_json(self) -> str:
        return json.dumps(
            {"offsets": self.offsets, "origin": self.origin.value, "config": self.config},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> SavedStart:
        raw = json.loads(text)
        offsets = {
            topic: {str(p): int(o) for p, o in parts.items()}
            for topic, parts in raw["offsets"].items()
        }
        return cls(offsets, StartOrigin(raw["origin"]), str(raw["config"]))


@dataclass(frozen=True)
class Start:
    origin: StartOrigin
    offsets: OffsetsJson | None
    """``None`` when Spark's checkpoint decides."""


def decide(
    state: CheckpointState,
    catalog_offsets: OffsetsJson | None,
    config: str,
    resolve_config: Callable[[], OffsetsJson],
) -> Start:
    """The rule of this module, as a pure function of what the checkpoint and catalog hold."""
    if state.finished:
        return Start(StartOrigin.CHECKPOINT, None)
    saved = state.saved
    if state.planned and saved is not None:
        return Start(StartOrigin.SAVED, saved.offsets)
    if catalog_offsets:
        return Start(StartOrigin.CATALOG, catalog_offsets)
    if saved is not None and saved.origin is StartOrigin.CONFIG and saved.config == config:
        return Start(StartOrigin.SAVED, saved.offsets)
    return Start(StartOrigin.CONFIG, resolve_config())


# -- the checkpoint directory ------------------------------------------------------------------


def read_state(checkpoint: Path) -> CheckpointState:
    path = checkpoint / START_FILE
    saved = SavedStart.from_json(path.read_text()) if path.is_file() else None
    return CheckpointState(
        planned=_has_batch(checkpoint / "offsets"),
        finished=_has_batch(checkpoint / "commits"),
        saved=saved,
    )


def save(checkpoint: Path, start: Start, config: str) -> None:
    """Persist a decided start before the query can plan batch 0 from it."""
    if start.offsets is None or start.origin is StartOrigin.SAVED:
        return
    origin = StartOrigin.CONFIG if start.origin is StartOrigin.CONFIG else StartOrigin.CATALOG
    _write_atomically(checkpoint / START_FILE, SavedStart(start.offsets, origin, config).to_json())


def incarnation(checkpoint: Path, state: CheckpointState) -> str:
    """The writer incarnation of this checkpoint: new whenever Spark has planned no batch.

    Spark numbers batches from 0 in a new checkpoint, so (job, batch id) alone would collide
    with the batches of a lost checkpoint; the incarnation tells them apart.
    """
    marker = checkpoint / INCARNATION_FILE
    if not state.planned or not marker.exists():
        _write_atomically(marker, uuid.uuid4().hex[:12])
    return marker.read_text().strip()


def _has_batch(log_dir: Path) -> bool:
    """Spark names log entries by batch id; checksums and temp files start with a dot."""
    return log_dir.is_dir() and any(entry.name.isdigit() for entry in log_dir.iterdir())


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    with temp.open("w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    temp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
