"""What a local Spark needs to know of the machine it starts on, passed in as values.

The class archive (:mod:`ingest.spark_archive`), the workers' launcher (:mod:`ingest.spark_python`)
and the session (:mod:`ingest.spark_session`) depend on the cache directory, the ``java`` Spark's
launcher runs, the Spark installation and the ``PYTHONPATH`` to pass on. Library code never looks
them up in the environment itself: the commands (``jobs/``, :func:`jobs.spark_env.spark_host`)
read it once and hand a :class:`SparkHost` down, so a test or a program states what it runs with
instead of setting variables for the whole process.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class SparkHost:
    cache_dir: Path
    """Where the driver's class archive and the workers' launcher are written."""
    java_home: str | None = None
    """A Java installation whose ``bin/java`` comes before ``path``'s (``JAVA_HOME``)."""
    path: str = os.defpath
    """The search path for ``java`` (``PATH``)."""
    spark_home: str | None = None
    """The Spark installation (``SPARK_HOME``); None: pyspark's own directory."""
    archive: bool = True
    """Start drivers from the class archive when a whole one fits (False: never)."""
    pythonpath: str = ""
    """The ``PYTHONPATH`` the session passes on to Spark's Python processes (this project's root
    is put first)."""

    def to_json(self) -> str:
        """For a child process that starts Spark for us (the archive's workload)."""
        return json.dumps({**asdict(self), "cache_dir": str(self.cache_dir)})

    @classmethod
    def from_json(cls, text: str) -> SparkHost:
        fields = json.loads(text)
        return cls(**{**fields, "cache_dir": Path(fields["cache_dir"])})
