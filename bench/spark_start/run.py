"""A driver's Spark start-up: with the class archive (``lakestream spark-archive``) vs without.

Each run is a new process, as a job's start is: Python starts, ``local_spark`` starts the JVM,
and one query (a sum over ``range``) runs; timed is the wall time from the process's spawn to
its end. Runs alternate (ABBA) so that the machine's drift falls on both sides alike; the
baseline is the same code with ``LAKESTREAM_SPARK_ARCHIVE=off``. Nothing is written to disk in
the timed part (no fsync on either side).

    python -m bench.spark_start.run --pairs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

import pyspark

from bench.common import environment, load_average, progress
from bench.machine import java_version
from ingest.spark_archive import build
from jobs.spark_env import SWITCH_ENV, spark_host

DRIVER = """
from ingest.spark_session import local_spark
from jobs.spark_env import spark_host
spark = local_spark("bench-spark-start", host=spark_host())
assert spark.range(1000).selectExpr("sum(id)").collect()[0][0] == 499500
"""


def start(archive: bool) -> float:
    env = {**os.environ, SWITCH_ENV: "on" if archive else "off"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", DRIVER], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    env = environment("bench.spark_start.run", argv or sys.argv[1:], "not used")
    progress(f"archive: {build(spark_host())}")
    times: dict[bool, list[float]] = {True: [], False: []}
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        for archive in order:
            times[archive].append(start(archive))
            progress(f"pair {pair + 1}: archive={archive} {times[archive][-1]:.1f} s")
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    lines = [line for line in env.lines(load_average()) if "PostgreSQL" not in line]
    lines += [
        f"- pyspark {pyspark.__version__}, Java {java_version()}, `local_spark` (`local[2]`)",
        f"- without the archive: median {without:.1f} s "
        f"({', '.join(f'{t:.1f}' for t in times[False])})",
        f"- with the archive: median {with_:.1f} s ({', '.join(f'{t:.1f}' for t in times[True])})",
        f"- start-up with / without: {with_ / without:.2f}x the time ({without / with_:.2f}x "
        "faster)",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
