"""How the job's processes use Python's cyclic garbage collector while they move data.

CPython's collector runs a young collection every 700 new container objects and, every tenth
and hundredth of those, walks older generations up to the whole heap. A process that decodes a
few hundred thousand events builds millions of short-lived objects, and a PySpark process holds
~125,000 long-lived ones (PySpark, py4j, pyarrow, pydantic): each full collection walked them
all, and everything a batch still held was walked again each time it moved up a generation.
Measured on the 2-core benchmark machine (``bench.ingest.transactions``, 1M events; the time in
``gc.callbacks``):

- a Spark Python worker writing one task's range (~35,000 events) ran ~120 young, 11 middle and
  one full collection, 75-200 ms of a task's 250-390 ms of CPU when the full one came. With
  :func:`tune_worker_collector` the workers used 5.2-5.8 s of CPU a run instead of 12.4-13.6 s,
  and a run took 8.0-8.5 s instead of 10.8-12.6 s (both modes);
- the driver in ``transactions: consistent`` (Kafka messages, markers, transaction states: tens
  of thousands a batch) spent 310-390 ms a run in the collector, most of it on the threads that
  prepare, decide and commit a batch; ~8 ms with :func:`collector_for_batches` (end to end
  the benchmark could not tell the difference: 0.825x against 0.863x over 3 runs each, inside
  its noise).

Both do the same: what the process holds when the work starts is frozen (``gc.freeze``: the
collector leaves it alone), and young objects are collected every :data:`YOUNG_THRESHOLD` new
ones. Garbage is still freed as soon as its last reference goes; only garbage in reference
cycles waits, at most until the next young collection (a few MB), or - among the frozen
objects - until they are handed back. A process that froze its heap itself manages its
collector: both leave it as it is.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "collector_for_batches", "tune_worker_collector"]

#: New container objects between two young collections while data moves (CPython: 700).
YOUNG_THRESHOLD = 100_000


@contextmanager
def collector_for_batches() -> Iterator[None]:
    """The driver's collector while a query runs (see the module docstring); afterwards the
    frozen objects and the thresholds are handed back as they were."""
    if gc.get_freeze_count():
        yield
        return
    thresholds = _freeze()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@functools.cache  # once per process: see below
def tune_worker_collector() -> None:
    """A Spark Python worker's collector, from its first task of the job on (see the module
    docstring). Spark reuses a worker for many tasks: the first one freezes what the worker
    holds then (its imports) and the later ones find it done; nothing is handed back, as the
    worker lives only to run tasks.

    Only the first task asks the collector: ``gc.get_freeze_count()`` counts the frozen
    objects one by one (~92,000 in a worker), and in a Spark worker that took 7-26 ms each
    time on the benchmark machine - every task paid it, ~100 ms of CPU a benchmark batch."""
    if not gc.get_freeze_count():
        _freeze()


def _freeze() -> tuple[int, int, int]:
    """Collect, freeze the survivors, raise the young threshold; the thresholds before."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    return thresholds
