"""The session settings: loopback only where driver and executors share a host, and the
driver's code path handed to executors that start from a worker's environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ingest.spark_host import SparkHost
from ingest.spark_session import process_environment, session_conf


def test_a_local_master_binds_the_driver_to_loopback() -> None:
    conf = session_conf("app", {}, "/src")
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"


@pytest.mark.parametrize("master", ["spark://m:7077", "k8s://https://api:6443", "yarn"])
def test_a_cluster_master_leaves_the_driver_address_to_spark(master: str) -> None:
    """Executors on other hosts could never connect back to 127.0.0.1."""
    conf = session_conf("app", {"spark.master": master}, "/src")
    assert "spark.driver.host" not in conf
    assert "spark.driver.bindAddress" not in conf


def test_executors_get_the_drivers_code_path_unless_the_settings_name_one() -> None:
    assert session_conf("app", {}, "/src:/lib")["spark.executorEnv.PYTHONPATH"] == "/src:/lib"
    given = {"spark.master": "spark://m:7077", "spark.executorEnv.PYTHONPATH": "/opt/app"}
    assert session_conf("app", given, "/src")["spark.executorEnv.PYTHONPATH"] == "/opt/app"


def test_the_settings_win_over_the_defaults() -> None:
    conf = session_conf("app", {"spark.driver.host": "10.0.0.5", "spark.ui.enabled": "true"}, "/s")
    assert conf["spark.driver.host"] == "10.0.0.5"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.app.name"] == "app"


def test_the_process_environment_comes_from_the_host_and_the_settings(tmp_path: Path) -> None:
    """What pyspark reads from ``os.environ`` is computed from explicit values, none read."""
    host = SparkHost(cache_dir=tmp_path, spark_home=str(tmp_path))  # another Spark: no launcher
    local = process_environment(session_conf("app", {}, "/src:/lib"), host)
    assert local == {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": "/src:/lib",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    cluster = process_environment(session_conf("app", {"spark.master": "yarn"}, "/src"), host)
    assert "SPARK_LOCAL_IP" not in cluster and cluster["PYTHONPATH"] == "/src"
