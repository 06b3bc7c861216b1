"""The Python that a local Spark starts for its workers: this interpreter, without Spark's zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the ``PYTHONPATH`` of
every Python process it starts (the task workers, the data source planners, the streaming
source's runner). Python keeps no compiled modules for a zip, so each of those processes compiled
pyspark's modules from source as it imported them: measured on the 2-core machine, a streaming
source runner's imports took 1.6-1.8 s of CPU from the zip and 0.7-0.8 s from the installed
package (``import pyspark.sql.streaming.python_streaming_source_runner, ingest.kafka.source``).
That runner must connect back to the JVM within a fixed 10 s, and a machine starting several
jobs at once sometimes starved it past that ("Python worker failed to connect back", which
:mod:`ingest.job` answers by starting the query again).

When Spark is pip's pyspark, the zip holds the very files of the installed package, which has its
compiled modules. So in local mode ``PYSPARK_PYTHON`` names a small shell script (written once to
the cache directory) that drops exactly those zips from ``PYTHONPATH`` and runs this interpreter.
Nowhere else: a cluster's executors run a Python of their own host; a ``SPARK_HOME`` of another
Spark belongs with its own zip; and a package imported from a zip here keeps its zip there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import sys
from pathlib import Path

from catalog.logs import get_logger
from ingest.spark_host import SparkHost

__all__ = ["launcher_script", "worker_python"]

log = get_logger("lakestream.ingest")


def worker_python(*, local: bool, host: SparkHost) -> str:
    """What ``PYSPARK_PYTHON`` should be: the launcher (see the module docstring, written to
    ``host``'s cache directory) where it applies, else this interpreter."""
    if not local:
        return sys.executable
    zips = _installed_zips(host.spark_home)
    if not zips:
        return sys.executable
    try:
        return str(_written(launcher_script(sys.executable, zips), host.cache_dir))
    except OSError as exc:  # a read-only cache: slower starts, nothing else
        log.info("spark_python_launcher_not_written", error=str(exc))
        return sys.executable


def launcher_script(python: str, dropped: list[str]) -> str:
    """A POSIX shell script that removes the entries ``dropped`` from ``PYTHONPATH`` (the
    others keep their order, empty ones too) and runs ``python`` with its arguments."""
    cases = "|".join(shlex.quote(entry) for entry in dropped)
    return f"""#!/bin/sh
# Written by lakestream (ingest/spark_python.py): Spark's Python processes import pyspark and
# py4j from the packages installed beside the interpreter below, not from Spark's zips.
set -f
kept=
first=1
IFS=:
for entry in ${{PYTHONPATH-}}; do
  case $entry in
    {cases}) ;;
    *) if [ "$first" ]; then kept=$entry; first=; else kept=$kept:$entry; fi ;;
  esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
exec {shlex.quote(python)} "$@"
"""


def _installed_zips(spark_home: str | None) -> list[str]:
    """Spark's zips that hold a package this interpreter imports from outside a zip, when
    Spark is this pyspark (``spark_home`` unset or its directory)."""
    pyspark = importlib.util.find_spec("pyspark")
    if pyspark is None or pyspark.origin is None or not Path(pyspark.origin).is_file():
        return []
    home = Path(pyspark.origin).parent
    if spark_home and Path(spark_home).resolve() != home.resolve():
        return []
    lib = home / "python" / "lib"
    found = [lib / "pyspark.zip"] if (lib / "pyspark.zip").is_file() else []
    py4j = importlib.util.find_spec("py4j")
    if py4j is not None and py4j.origin is not None and Path(py4j.origin).is_file():
        found += sorted(lib.glob("py4j-*-src.zip"))
    return [str(path) for path in found]


def _written(script: str, cache: Path) -> Path:
    """The launcher with this content in the cache directory (named by its content, written
    under a temporary name and renamed: processes starting together never run half a file)."""
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    path = cache / f"spark-python-{digest}.sh"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(script)
    partial.chmod(0o755)
    partial.replace(path)
    return path
