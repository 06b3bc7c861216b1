"""``source.reader`` in ``lakestream ingest``'s settings, and the one combination it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingest.kafka.spark_source import SourceReader
from jobs.ingest_config import IngestSettings, describe
from jobs.settings import ConfigError


def _write(tmp_path: Path, source: dict[str, object], **top: object) -> Path:
    config = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u@127.0.0.1:1/lake"},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "source": source,
        "checkpoint": str(tmp_path / "cp"),
        **top,
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_python_reader_is_the_default_and_spark_is_taken(tmp_path: Path) -> None:
    default = IngestSettings.from_yaml(_write(tmp_path, {"topics": ["a.b.c"]}))
    spark = IngestSettings.from_yaml(_write(tmp_path, {"topics": ["a.b.c"], "reader": "spark"}))

    assert default.job_config().source_reader is SourceReader.PYTHON
    assert spark.job_config().source_reader is SourceReader.SPARK
    assert describe(spark)["reader"] == "spark"


def test_an_unknown_reader_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reader"):
        IngestSettings.from_yaml(_write(tmp_path, {"topics": ["a.b.c"], "reader": "jvm"}))


def test_consistent_transactions_with_the_spark_reader_exit_2_in_one_line(tmp_path: Path) -> None:
    """Refused before anything starts (no catalog, broker or Spark is reachable here)."""
    config = _write(
        tmp_path, {"topics": ["s.public.t", "s.transaction"], "reader": "spark"}
    )  # transactions: auto, consistent by the subscription
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "transactions: consistent needs source.reader: python" in last, done.stderr
