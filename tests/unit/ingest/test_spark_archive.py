"""When a driver gets the class archive: only a whole one, built for its classpath, and never
against the user's own class-sharing options or ``LAKESTREAM_SPARK_ARCHIVE=off``.

The machine is a :class:`SparkHost` each test states (cache directory, Spark installation);
only the command of ``test_the_command_without_java_fails_in_one_line`` reads an environment."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ingest import spark_archive
from ingest.spark_archive import JAVA_OPTIONS, Archive, archive_for, build, driver_options
from ingest.spark_host import SparkHost
from jobs.spark_env import CACHE_ENV, spark_host


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def host(cache: Path) -> SparkHost:
    """This machine's java and pyspark, a cache of the test's own."""
    return dataclasses.replace(spark_host(), cache_dir=cache, spark_home=None, archive=True)


def whole(conf: dict[str, str], host: SparkHost) -> Archive:
    """A stand-in archive where ``conf``'s would be, with its size recorded as a build does."""
    archive = archive_for(conf, host)
    assert archive is not None, "the tests need java and pyspark's jars"
    archive.path.write_bytes(b"x" * 100)
    archive.size_file.write_text(json.dumps({"size": 100}))
    return archive


def test_no_archive_leaves_the_driver_as_it_was(
    host: SparkHost, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """...and says how to build one, through the commands' logging: never on stdout, where a
    command's --json output goes."""
    with caplog.at_level(logging.INFO, logger="lakestream"):
        assert driver_options({"spark.master": "local[2]"}, host) == {}
    assert [r.getMessage().split()[0] for r in caplog.records] == ["spark_class_archive_missing"]
    assert capsys.readouterr().out == ""


def test_a_whole_archive_goes_before_the_users_own_default_options(host: SparkHost) -> None:
    archive = whole({}, host)
    options = driver_options({JAVA_OPTIONS: "-Dadmin=1"}, host)[JAVA_OPTIONS]
    assert options.startswith(f"-XX:SharedArchiveFile={archive.path} -Xshare:auto ")
    assert options.endswith(" -Dadmin=1")
    # a JVM that crashes on the archive reports beside it, not in the user's working directory
    assert f" -XX:ErrorFile={archive.path.parent}/hs_err_pid%p.log " in options


def test_the_users_extra_options_are_not_touched(host: SparkHost) -> None:
    whole({}, host)
    options = driver_options({"spark.driver.extraJavaOptions": "-Xmx2g"}, host)
    assert set(options) == {JAVA_OPTIONS}


def test_a_truncated_archive_is_never_given_to_the_jvm(host: SparkHost) -> None:
    """A short file crashes the JVM as it maps it (SIGBUS): the recorded size must match."""
    archive = whole({}, host)
    archive.path.write_bytes(b"x" * 60)
    assert not archive.is_whole()
    assert driver_options({}, host) == {}


def test_an_archive_without_its_recorded_size_is_not_used(host: SparkHost) -> None:
    archive = whole({}, host)
    archive.size_file.unlink()
    assert driver_options({}, host) == {}
    archive.size_file.write_text("not json")
    assert driver_options({}, host) == {}


def test_extra_jars_need_an_archive_of_their_own(host: SparkHost) -> None:
    whole({}, host)
    with_jars = {"spark.jars": "/opt/extra.jar"}
    assert archive_for(with_jars, host) != archive_for({}, host)
    assert driver_options(with_jars, host) == {}


@pytest.mark.parametrize(
    "option", ["-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x"]
)
@pytest.mark.parametrize("key", [JAVA_OPTIONS, "spark.driver.extraJavaOptions"])
def test_the_users_own_class_sharing_wins(host: SparkHost, key: str, option: str) -> None:
    whole({}, host)
    assert driver_options({key: option}, host) == {}


def test_switched_off(host: SparkHost) -> None:
    whole({}, host)
    assert driver_options({}, dataclasses.replace(host, archive=False)) == {}


def test_the_command_without_java_fails_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "spark-archive"],
        env={"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "none"), CACHE_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: no 'java' in $JAVA_HOME/bin or on PATH; install a Java 17 runtime or set JAVA_HOME"
    ]


def test_each_spark_installation_has_its_own_archive(tmp_path: Path, host: SparkHost) -> None:
    """The JVM compares the classpath's paths with the archive's: two venvs with the same
    pyspark must not share one."""
    paths = []
    for venv in ("a", "b"):
        jars = tmp_path / venv / "jars"
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"same")
        archive = archive_for({}, dataclasses.replace(host, spark_home=str(tmp_path / venv)))
        assert archive is not None
        paths.append(archive.path)
    assert paths[0] != paths[1]


def test_a_reinstalled_spark_gets_a_new_archive(tmp_path: Path, host: SparkHost) -> None:
    """The JVM also compares each jar's modification time, and refuses the whole archive when
    one differs (measured: a venv made again at the same path, same pyspark, jars written anew,
    was refused with "A jar file is not the one used while building the shared archive file"
    on every start). So a reinstall must find no archive rather than a refused one."""
    jar = tmp_path / "jars" / "spark-core.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"same")
    host = dataclasses.replace(host, spark_home=str(tmp_path))
    before = archive_for({}, host)
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    after = archive_for({}, host)
    assert before is not None and after is not None
    assert before.path != after.path


def test_a_build_removes_the_archives_no_driver_can_use(
    tmp_path: Path, cache: Path, host: SparkHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every new venv and every reinstall writes an archive of ~170 MB: the next build deletes
    those whose Spark installation is gone or changed, and keeps other live installations'."""
    monkeypatch.setattr(
        spark_archive, "_dump", lambda partial, timeout, host: partial.write_bytes(b"x")
    )

    def install(name: str) -> Path:
        jar = tmp_path / "homes" / name / "jars" / "spark-core.jar"
        jar.parent.mkdir(parents=True)
        jar.write_bytes(b"same")
        return jar

    def build_for(name: str) -> Path:
        return build(dataclasses.replace(host, spark_home=str(tmp_path / "homes" / name)))

    install("removed")
    build_for("removed")
    shutil.rmtree(tmp_path / "homes" / "removed")
    jar = install("reinstalled")
    build_for("reinstalled").with_suffix(".refused").write_bytes(b"set aside")
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    install("other")
    other = build_for("other")
    legacy = cache / "spark-driver-0123456789abcdef.jsa"  # named before mtimes counted
    legacy.write_bytes(b"x")
    legacy.with_suffix(".json").write_text(json.dumps({"size": 1}))

    current = build_for("reinstalled")
    left = sorted(p.name for p in cache.glob("spark-driver-*"))
    kept = [other, other.with_suffix(".json"), current, current.with_suffix(".json")]
    assert left == sorted(p.name for p in kept)
