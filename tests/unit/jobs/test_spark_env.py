"""The commands read a local Spark's machine from their environment (:mod:`jobs.spark_env`)."""

from __future__ import annotations

from pathlib import Path

from jobs.spark_env import CACHE_ENV, SWITCH_ENV, spark_host


def test_the_switch_the_cache_and_the_installations_come_from_the_environment() -> None:
    env = {"PATH": "/bin", CACHE_ENV: "/c", SWITCH_ENV: "OFF", "SPARK_HOME": "", "JAVA_HOME": "/j"}
    read = spark_host(env)
    assert (read.cache_dir, read.archive, read.path) == (Path("/c"), False, "/bin")
    assert (read.spark_home, read.java_home) == (None, "/j")  # empty counts as unset


def test_without_a_cache_variable_the_cache_is_xdgs_or_the_homes() -> None:
    assert spark_host({"XDG_CACHE_HOME": "/x"}).cache_dir == Path("/x/lakestream")
    home = spark_host({}).cache_dir
    assert home == Path.home() / ".cache" / "lakestream"
    assert spark_host({"PYTHONPATH": "/p"}).archive is True
