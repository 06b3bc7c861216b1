"""A Python process of a local Spark, started as Spark starts it: through the launcher of
:mod:`ingest.spark_python` vs the interpreter itself.

Spark gives each Python process it starts (task workers' daemons, data source planners, the
streaming source's runner) a ``PYTHONPATH`` that begins with its zips of pyspark and py4j. Each
run here spawns one process with that ``PYTHONPATH`` (the zips, then this project) which imports
what the streaming source's runner imports before it connects back to the JVM - the runner's
module and the Kafka source - and exits; timed are its wall time and its CPU time (user + system,
of the process and the launcher's shell). The baseline runs the interpreter directly, as Spark
did before; runs alternate (ABBA). Nothing is written to disk (no fsync on either side).

    python -m bench.spark_start.python_start --pairs 10
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pyspark

from bench.common import environment, load_average, progress
from ingest.spark_python import worker_python
from jobs.spark_env import spark_host

IMPORTS = "import pyspark.sql.streaming.python_streaming_source_runner, ingest.kafka.source"
ROOT = Path(__file__).resolve().parents[2]


def sparks_pythonpath() -> str:
    """The ``PYTHONPATH`` Spark gives its Python processes: its zips first, then the job's."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))]
    return os.pathsep.join([*map(str, zips), str(ROOT)])


def start(python: str) -> tuple[float, float]:
    """Wall and CPU seconds of one process started with ``python``."""
    env = {**os.environ, "PYTHONPATH": sparks_pythonpath()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([python, "-c", IMPORTS], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args(argv)
    env = environment("bench.spark_start.python_start", argv or sys.argv[1:], "not used")
    launcher = worker_python(local=True, host=spark_host())
    if launcher == sys.executable:
        progress("no launcher applies here (see ingest/spark_python.py): nothing to compare")
        return 1
    sides = {"interpreter (Spark's zips first)": sys.executable, "launcher": launcher}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for pair in range(args.pairs):
        names = list(sides) if pair % 2 == 0 else list(reversed(sides))
        for name in names:
            runs[name].append(start(sides[name]))
            wall, cpu = runs[name][-1]
            progress(f"pair {pair + 1}: {name}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    lines = [line for line in env.lines(load_average()) if "PostgreSQL" not in line]
    lines.append(f"- pyspark {pyspark.__version__}; the process imports `{IMPORTS[7:]}`")
    medians = {}
    for name, timed in runs.items():
        walls, cpus = [w for w, _ in timed], [c for _, c in timed]
        medians[name] = (statistics.median(walls), statistics.median(cpus))
        lines.append(
            f"- {name}: median {medians[name][0]:.2f} s wall, {medians[name][1]:.2f} s CPU "
            f"(CPU of each: {', '.join(f'{c:.2f}' for c in cpus)})"
        )
    (base_wall, base_cpu), (wall, cpu) = medians.values()
    lines.append(
        f"- launcher / interpreter: {wall / base_wall:.2f}x the wall time, "
        f"{cpu / base_cpu:.2f}x the CPU"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
