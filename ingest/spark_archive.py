"""A class-data-sharing archive of the Spark driver's JVM: a job's Spark starts twice as fast.

A fresh driver JVM loads and verifies some 17,000 classes before the first batch can run; on a
2-core machine that was ~7 s of a local session's start and ~3.5 s of its first query. The JVM
can map 12,000 of them from an archive written by an earlier run instead (HotSpot's dynamic
AppCDS, ``-XX:ArchiveClassesAtExit`` / ``-XX:SharedArchiveFile``): measured here, a local session
and its first query went from 11-13 s to 5-7 s, and two ingest tests that run jobs as subprocesses
from 73-78 s to 51-56 s.

:func:`build` writes the archive (``lakestream spark-archive``; ``dev/setup`` and the Docker image
run it) by running a small streaming query in a child process whose JVM dumps what it loaded as
it exits. :func:`driver_options` adds it to a driver's options when one fits this machine's Java,
pyspark and classpath: the file is named after them, so an upgrade simply finds no archive.

A truncated archive crashes the JVM as it maps it (SIGBUS, measured), so it is written under a
temporary name, checked, and renamed into place; its size is kept beside it and compared before
every use. A JVM that still refuses it starts without it (:func:`refused`).

Where the archive lives, which ``java`` and Spark it is for, and whether it is used at all come
in a :class:`~ingest.spark_host.SparkHost` (the commands read ``LAKESTREAM_CACHE_DIR``,
``LAKESTREAM_SPARK_ARCHIVE=off``, ``JAVA_HOME``, ``PATH`` and ``SPARK_HOME``: see
:mod:`jobs.spark_env`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from catalog.logs import get_logger
from ingest.errors import IngestError
from ingest.spark_host import SparkHost

log = get_logger("lakestream.ingest")

#: Where the archive's options go: Spark puts them before the user's ``extraJavaOptions``,
#: which so stay whatever they are (from the job's settings or ``spark-defaults.conf``).
JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
_USER_OPTIONS = "spark.driver.extraJavaOptions"
#: Settings that change the driver's classpath: an archive is only good for the one it saw.
_CLASSPATH_CONF = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
#: A user's own options that decide class sharing themselves.
_USERS_OWN = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
#: A JVM that cannot use an archive says so in a warning, by default on stdout - the driver's
#: stdout, where ``lakestream compact --json`` writes its report. Class sharing's lines go to
#: stderr instead, with the commands' other diagnostics.
_CDS_TO_STDERR = "-Xlog:cds*=off:stdout -Xlog:cds*=warning:stderr"


class ArchiveError(IngestError, RuntimeError):
    """The archive could not be built."""


@dataclass(frozen=True)
class Archive:
    """Where the archive for one (Java, pyspark, classpath) lives, and its recorded size."""

    path: Path

    @property
    def size_file(self) -> Path:
        return self.path.with_suffix(".json")

    def is_whole(self) -> bool:
        """True when the file is there with the size its build recorded."""
        try:
            recorded = json.loads(self.size_file.read_text())["size"]
            return isinstance(recorded, int) and self.path.stat().st_size == recorded
        except (OSError, ValueError, KeyError, TypeError):
            return False


def archive_for(conf: Mapping[str, str], host: SparkHost) -> Archive | None:
    """The archive that fits a driver started with ``conf`` on ``host``; None where none can
    (no ``java`` on its path, pyspark without its jars)."""
    fingerprint = _fingerprint(conf, host)
    if fingerprint is None:
        return None
    return Archive(host.cache_dir / f"spark-driver-{fingerprint}.jsa")


def _fingerprint(
    conf: Mapping[str, str], host: SparkHost, spark_home: Path | None = None
) -> str | None:
    """What an archive depends on: the Java binary, pyspark's jars, the classpath settings."""
    java = _java(host)
    jars = _spark_jars(spark_home or _spark_home(host))
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    binary = Path(java).resolve()
    stat = binary.stat()
    digest.update(f"{binary}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    # the JVM checks each jar's path, size and modification time against the archive's and
    # refuses the whole archive on any difference (with a warning on every start): another venv,
    # or the same one installed again, needs its own
    for jar in sorted(jars.resolve().iterdir()):
        jar_stat = jar.stat()
        digest.update(f"{jar}:{jar_stat.st_size}:{jar_stat.st_mtime_ns}\n".encode())
    for key in _CLASSPATH_CONF:
        digest.update(f"{key}={conf.get(key, '')}\n".encode())
    return digest.hexdigest()[:16]


def _java(host: SparkHost) -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin``'s first, then PATH's."""
    home, path = host.java_home, host.path
    return shutil.which(
        "java", path=os.pathsep.join([str(Path(home) / "bin"), path]) if home else path
    )


def _spark_jars(spark_home: Path) -> Path | None:
    jars = spark_home / "jars"
    return jars if jars.is_dir() else None


def _spark_home(host: SparkHost) -> Path:
    """``$SPARK_HOME``, else pyspark's own directory (as Spark's launcher finds it)."""
    if host.spark_home:
        return Path(host.spark_home)
    import pyspark

    return Path(pyspark.__file__).parent


def driver_options(conf: Mapping[str, str], host: SparkHost) -> dict[str, str]:
    """``conf``'s driver options with the archive added, when ``host`` uses one and one fits and
    is whole; else nothing (the driver starts as before: only slower)."""
    if not host.archive:
        return {}
    own = conf.get(JAVA_OPTIONS, "")
    if any(flag in f"{own} {conf.get(_USER_OPTIONS, '')}" for flag in _USERS_OWN):
        return {}
    archive = archive_for(conf, host)
    if archive is None or not archive.is_whole():
        log.info(
            "spark_class_archive_missing",
            hint="'lakestream spark-archive' builds it: a job's Spark then starts ~2x faster",
        )
        return {}
    options = (
        f"-XX:SharedArchiveFile={archive.path} -Xshare:auto {_CDS_TO_STDERR} "
        f"-XX:ErrorFile={_crash_reports(archive)} {own}"
    ).strip()
    return {JAVA_OPTIONS: options}


def _crash_reports(archive: Archive) -> Path:
    """Where a driver JVM started with the archive writes its crash report (``%p``: its pid).

    A JVM that cannot map the archive dies of SIGBUS before it runs anything, and HotSpot writes
    ``hs_err_pid<pid>.log`` into the working directory by default: the user's, for a refusal
    that :func:`refused` handles and logs. The report goes beside the archive instead (a user's
    own ``-XX:ErrorFile`` comes later on the command line and wins)."""
    return archive.path.parent / "hs_err_pid%p.log"


def refused(conf: Mapping[str, str], host: SparkHost) -> None:
    """Set aside the archive a JVM would not start with (renamed ``.refused``), so the next
    start neither tries it again nor loses the evidence."""
    archive = archive_for(conf, host)
    if archive is None:
        return
    try:
        archive.path.replace(archive.path.with_suffix(".refused"))
    except OSError:
        return
    log.warning(
        "spark_class_archive_refused",
        path=str(archive.path),
        crash_reports=str(_crash_reports(archive)).replace("%p", "*"),
        hint="the driver started without it; 'lakestream spark-archive' builds a new one",
    )


def build(host: SparkHost, *, force: bool = False, timeout: float = 600.0) -> Path:
    """Write the archive for ``host``'s default driver (no extra jars), unless a whole one is
    there already; returns its path.

    Raises:
        ArchiveError: no ``java`` or Spark jars, or the child's JVM wrote no whole archive.
    """
    archive = archive_for({}, host)
    if archive is None:
        raise ArchiveError(_why_none(host))
    if archive.is_whole() and not force:
        return archive.path
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.path.with_name(f"{archive.path.name}.{os.getpid()}.partial")
    try:
        _dump(partial, timeout, host)
        size = partial.stat().st_size
        partial.replace(archive.path)
        home = str(_spark_home(host).resolve())
        archive.size_file.write_text(json.dumps({"size": size, "spark_home": home}))
    finally:
        partial.unlink(missing_ok=True)
    _remove_stale(archive.path.parent, host)
    return archive.path


def _remove_stale(cache: Path, host: SparkHost) -> None:
    """Delete the archives no driver can use any more: their Spark installation is gone, or was
    installed again or upgraded, or Java changed (any of which changes the name an archive is
    looked up by). Each is ~170 MB, and every new venv or reinstall writes one.

    An archive from before its Spark installation was recorded beside it is stale too: those
    names were computed without the jars' modification times, which every name now includes."""
    for size_file in cache.glob("spark-driver-*.json"):
        try:
            home = json.loads(size_file.read_text()).get("spark_home")
        except (OSError, ValueError, AttributeError):
            continue  # being written, or not ours to judge
        name = size_file.stem.removeprefix("spark-driver-")
        if isinstance(home, str) and _fingerprint({}, host, Path(home)) == name:
            continue
        for stale in (size_file.with_suffix(".jsa"), size_file.with_suffix(".refused")):
            stale.unlink(missing_ok=True)
        size_file.unlink(missing_ok=True)
        log.info("spark_class_archive_removed", archive=str(size_file.with_suffix(".jsa")))


def _why_none(host: SparkHost) -> str:
    if _java(host) is None:
        return "no 'java' in $JAVA_HOME/bin or on PATH; install a Java 17 runtime or set JAVA_HOME"
    return f"no Spark jars in {_spark_home(host)}/jars; reinstall pyspark or set SPARK_HOME"


def _dump(partial: Path, timeout: float, host: SparkHost) -> None:
    """Run :mod:`ingest.spark_archive_workload` in a child whose JVM dumps to ``partial``; it
    starts Spark on ``host``, without an archive (it is writing one)."""
    workload = replace(host, archive=False).to_json()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ingest.spark_archive_workload", str(partial), workload],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ArchiveError(f"the archive's Spark run took longer than {timeout:.0f} s") from None
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise ArchiveError(f"the JVM wrote no archive (exit {done.returncode}): {tail}")
