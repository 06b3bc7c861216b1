"""What the demo shows while it streams: one line every ~2 s, redrawn in place on a terminal.

Every figure is read where a user would read it: events from the Debezium consumer's count, the
lake's progress from the offsets the ingest job committed with its last batch (in the catalog),
versions, files and compactions from the tables' heads, plans and histories.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from catalog import Catalog, CommitOp, Table, TableNotFoundError


@dataclass(frozen=True)
class Sample:
    elapsed: float
    rate: float
    """Events per second Debezium handed to the broker since the last sample."""
    lag: int
    """Source events not yet in the lake (made by the workload, not committed by ingest)."""
    versions: dict[str, int]
    files_max: int
    """The most files any bucket of any table holds: what a reader merges."""
    files_mean: float
    compactions: int

    def line(self) -> str:
        versions = "/".join(str(v) for v in self.versions.values()) or "-"
        return (
            f"{self.elapsed:4.0f}s  {self.rate:5.0f} events/s  lag {self.lag:<5}  "
            f"versions {versions}  files/bucket max {self.files_max} "
            f"avg {self.files_mean:.1f}  compactions {self.compactions}"
        )


@dataclass
class LakeWatch:
    """Reads the lake's progress for one ingest job's tables."""

    catalog: Catalog
    job: str
    tables: tuple[str, ...]
    _loaded: dict[str, Table] = field(default_factory=dict)
    _seen: dict[str, int] = field(default_factory=dict)
    compactions: int = 0

    def records_in_lake(self) -> int:
        """Kafka records the job committed: the sum of its stored next offsets (topics start
        at offset 0 on the demo's broker)."""
        progress = self.catalog.writer_progress(self.job)
        if progress is None:
            return 0
        return sum(int(o) for parts in progress.source_offsets.values() for o in parts.values())

    def table(self, name: str) -> Table | None:
        if name not in self._loaded:
            try:
                self._loaded[name] = self.catalog.load_table(name)
            except TableNotFoundError:  # the job creates it with its first batch
                return None
        return self._loaded[name]

    def versions(self) -> dict[str, int]:
        found = {}
        for name in self.tables:
            table = self.table(name)
            found[name.split(".")[-1]] = 0 if table is None else table.current_version()
        return found

    def files_per_bucket(self) -> tuple[int, float]:
        counts = []
        for name in self.tables:
            table = self.table(name)
            if table is not None:
                counts += [len(p.files) for p in table.plan().partitions]
        return (max(counts), sum(counts) / len(counts)) if counts else (0, 0.0)

    def count_compactions(self) -> int:
        """Compaction commits so far (read incrementally: only versions not seen before)."""
        for name in self.tables:
            table = self.table(name)
            if table is None:
                continue
            new = table.history(limit=100_000, after=self._seen.get(name, 0))
            if new:
                self._seen[name] = max(v.version for v in new)
                self.compactions += sum(v.op is CommitOp.COMPACTION for v in new)
        return self.compactions


class Progress:
    """Samples every ``interval`` seconds and prints: redrawn in place on a terminal, plain
    lines otherwise (a log file or a pipe gets no carriage returns)."""

    def __init__(self, watch: LakeWatch, out: TextIO | None = None, interval: float = 2.0):
        self.watch = watch
        self.out = out or sys.stdout
        self.interval = interval
        self.tty = self.out.isatty()
        self.started = time.monotonic()
        self._last = (self.started, 0)
        self._drawn = False

    def due(self) -> bool:
        return time.monotonic() - self._last[0] >= self.interval

    def sample(self, captured: int, expected: int) -> Sample:
        now = time.monotonic()
        then, before = self._last
        self._last = (now, captured)
        files_max, files_mean = self.watch.files_per_bucket()
        return Sample(
            elapsed=now - self.started,
            rate=(captured - before) / max(now - then, 1e-3),
            lag=max(0, expected - self.watch.records_in_lake()),
            versions=self.watch.versions(),
            files_max=files_max,
            files_mean=files_mean,
            compactions=self.watch.count_compactions(),
        )

    def show(self, sample: Sample) -> None:
        if self.tty:
            self.out.write("\r\033[K" + sample.line())
            self._drawn = True
        else:
            self.out.write(sample.line() + "\n")
        self.out.flush()

    def say(self, text: str) -> None:
        """A message of its own line (ends a line being redrawn first)."""
        self.end_line()
        self.out.write(text + "\n")
        self.out.flush()

    def end_line(self) -> None:
        if self._drawn:
            self.out.write("\n")
            self._drawn = False
