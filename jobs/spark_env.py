"""The commands' one look at the environment for a local Spark (see :mod:`ingest.spark_host`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ingest.spark_host import SparkHost

#: ``off`` disables the driver's class archive; anything else (or unset) uses one when it is there.
SWITCH_ENV = "LAKESTREAM_SPARK_ARCHIVE"
#: The cache directory of the class archive and the workers' launcher.
CACHE_ENV = "LAKESTREAM_CACHE_DIR"


def spark_host(environ: Mapping[str, str] | None = None) -> SparkHost:
    """The :class:`SparkHost` that ``environ`` (default: this process's environment) describes;
    an empty variable counts as unset."""
    env = os.environ if environ is None else environ
    return SparkHost(
        cache_dir=cache_dir(env),
        java_home=env.get("JAVA_HOME") or None,
        path=env.get("PATH", os.defpath),
        spark_home=env.get("SPARK_HOME") or None,
        archive=env.get(SWITCH_ENV, "").lower() != "off",
        pythonpath=env.get("PYTHONPATH", ""),
    )


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$LAKESTREAM_CACHE_DIR``, else ``$XDG_CACHE_HOME/lakestream``, else ``~/.cache``'s."""
    explicit = environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lakestream"
