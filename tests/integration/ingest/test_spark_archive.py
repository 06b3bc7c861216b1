"""The driver's class archive, built and used by real JVMs: Spark's classes come from it, and an
archive the JVM cannot map (it would crash on it) is set aside while the driver starts anyway."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.spark_archive import JAVA_OPTIONS, archive_for, build, driver_options
from jobs.spark_env import CACHE_ENV, SWITCH_ENV, spark_host

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
#: A driver (logging as the commands do) whose JVM logs where each class came from.
DRIVER = """
import sys
from ingest.spark_session import local_spark
from jobs.logs import configure_logging
from jobs.spark_env import spark_host
configure_logging("INFO", json=True)
spark = local_spark("archive-test", {
    "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"},
    host=spark_host())
print("sum", spark.range(10).selectExpr("sum(id)").collect()[0][0])
"""
FROM_ARCHIVE = "source: shared objects file (top)"


def start_driver(home: Path, class_log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(class_log)],
        cwd=home,  # where a crashing JVM would leave its hs_err file by default
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_a_built_archive_feeds_the_driver_and_a_broken_one_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # the drivers below are commands of their own: they read the cache directory from theirs
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    host = spark_host()
    path = build(host)
    archive = archive_for({}, host)
    assert archive is not None and archive.path == path and archive.is_whole()
    assert build(host) == path  # a whole one is kept, not built again
    assert list(path.parent.glob("*.partial")) == []

    used = start_driver(tmp_path, tmp_path / "classes.log")
    assert used.returncode == 0, used.stderr[-3000:]
    assert "sum 45" in used.stdout
    shared = (tmp_path / "classes.log").read_text().count(FROM_ARCHIVE)
    assert shared > 5000, f"only {shared} classes came from the archive"

    # a JVM that will not use it (here: another classpath) says so on stderr, never on the
    # stdout that the driver's JVM shares with a command's --json report
    options = driver_options({}, host)[JAVA_OPTIONS].split()
    java = shutil.which("java") or "java"
    other = subprocess.run(
        [java, *options, "-cp", str(tmp_path), "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert other.returncode == 0, other.stderr
    assert "archive" not in other.stdout
    assert "Unable to use shared archive" in other.stderr

    # a file the JVM cannot map whole, though its recorded size matches (not a build's doing)
    with path.open("r+b") as archived:
        archived.truncate(1_000_000)
    archive.size_file.write_text(json.dumps({"size": 1_000_000}))
    fallback = start_driver(tmp_path, tmp_path / "classes-after.log")
    assert fallback.returncode == 0, fallback.stderr[-3000:]
    assert "sum 45" in fallback.stdout
    assert "spark_class_archive_refused" in fallback.stdout + fallback.stderr
    assert not path.exists() and path.with_suffix(".refused").exists()
    assert (tmp_path / "classes-after.log").read_text().count(FROM_ARCHIVE) == 0
    # the refusing JVM's crash report went beside the archive, not into the working directory
    assert list(tmp_path.glob("hs_err_pid*.log")) == []
    assert len(list(path.parent.glob("hs_err_pid*.log"))) == 1
