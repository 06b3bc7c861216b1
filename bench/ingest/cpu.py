"""CPU seconds spent by this benchmark's processes, by component, read from ``/proc``.

On a machine shared with other work, wall-clock rates move with the load; the CPU time a
pipeline consumed moves much less, so it is reported beside them. The process tree under this
process is split into components: this process (the driver: Spark's Python driver, the ingest
job's sink, the raw consumer), the JVM, Spark's Python workers (``pyspark.daemon`` and the
workers it forks: the source's reads, ``mapInArrow`` tasks) and the broker (Apache Kafka, a JVM
told apart from Spark's by its main class). For each live process ``utime + stime + cutime +
cstime`` counts its own time and that of every descendant it has reaped, so the sum over the
live tree is everything the tree ever used.
PostgreSQL is not in the tree (``pg_ctl`` detaches it); the catalog's share shows in the job's
``commit_ms`` instead.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

COMPONENTS = ("driver", "jvm", "python workers", "broker", "other")
_TICK = float(os.sysconf("SC_CLK_TCK"))


def _read(pid: int) -> tuple[str, int, float] | None:
    """(command name, parent pid, CPU seconds incl. reaped children) of a process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return name, int(fields[1]), ticks / _TICK


def _component(pid: int, name: str, root: int, parent: str) -> str:
    """What a process is; one that cannot tell (a worker that exited and awaits its parent's
    wait(), whose command line reads empty) counts with its parent, the worker daemon."""
    if pid == root:
        return "driver"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    if name == "java":
        return "broker" if b"\0kafka.Kafka\0" in cmdline else "jvm"
    if b"pyspark" in cmdline:
        return "python workers"
    return parent if not cmdline and parent != "driver" else "other"


def snapshot(root: int | None = None) -> dict[str, float]:
    """CPU seconds used so far by each component of the tree under ``root`` (this process)."""
    root = root or os.getpid()
    processes: dict[int, tuple[str, int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _read(int(entry.name))
            if found is not None:
                processes[int(entry.name)] = found
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (_, parent_pid, _) in processes.items():
        children[parent_pid].append(pid)
    totals = dict.fromkeys(COMPONENTS, 0.0)
    stack = [(root, "other")]
    while stack:
        pid, parent = stack.pop()
        if pid not in processes:
            continue
        name, _, seconds = processes[pid]
        component = _component(pid, name, root, parent)
        totals[component] += seconds
        stack.extend((child, component) for child in children.get(pid, ()))
    return totals


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before[name], 2) for name in COMPONENTS}
