"""The Python a local Spark starts for its workers (:mod:`ingest.spark_python`): this
interpreter, with Spark's zips of packages it has installed taken off ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.spark_host import SparkHost
from ingest.spark_python import launcher_script, worker_python

_SHOW = "import json, os, sys; print(json.dumps([os.environ.get('PYTHONPATH'), sys.argv[1:]]))"
_ZIP = "/spark/python/lib/pyspark.zip"
_PY4J = "/spark home/python/lib/py4j-0.10.9.9-src.zip"


def _launch(script: Path, pythonpath: str | None, *args: str) -> tuple[str | None, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        ["/bin/sh", str(script), "-c", _SHOW, *args],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    seen, argv = json.loads(done.stdout)
    return seen, argv


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "python.sh"
    path.write_text(launcher_script(sys.executable, [_ZIP, _PY4J]))
    return path


@pytest.mark.parametrize(
    ("given", "left"),
    [
        (f"{_ZIP}:{_PY4J}:/work/app:/lib/a*b", "/work/app:/lib/a*b"),
        (f":/a::{_ZIP}:/b", ":/a::/b"),  # empty entries (the working directory) stay
        (f"/first:{_ZIP}", "/first"),
        (_ZIP, ""),
        ("/spark/python/lib/pyspark.zip.bak:/x", "/spark/python/lib/pyspark.zip.bak:/x"),
        (None, ""),
    ],
)
def test_the_launcher_drops_exactly_the_zips_and_keeps_the_rest_in_order(
    script: Path, given: str | None, left: str
) -> None:
    assert _launch(script, given) == (left, [])


def test_the_launcher_runs_the_interpreter_with_its_arguments_as_given(script: Path) -> None:
    assert _launch(script, "/x", "two words", "*", "$HOME") == ("/x", ["two words", "*", "$HOME"])


def test_a_cluster_runs_its_own_python(tmp_path: Path) -> None:
    """Executors on other hosts never see this machine's cache directory."""
    assert worker_python(local=False, host=SparkHost(cache_dir=tmp_path)) == sys.executable
    assert not list(tmp_path.iterdir())


def test_another_spark_home_keeps_its_own_zip(tmp_path: Path) -> None:
    """The zip of another Spark belongs with that Spark's JVM, not with this pyspark."""
    host = SparkHost(cache_dir=tmp_path / "cache", spark_home=str(tmp_path))
    assert worker_python(local=True, host=host) == sys.executable


def test_local_spark_runs_the_launcher_for_pips_pyspark(tmp_path: Path) -> None:
    import pyspark

    host = SparkHost(cache_dir=tmp_path)
    python = worker_python(local=True, host=host)
    assert Path(python).parent == tmp_path and os.access(python, os.X_OK)
    assert worker_python(local=True, host=host) == python  # written once, found again
    zip_path = str(Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip")
    assert _launch(Path(python), f"{zip_path}:/app") == ("/app", [])


def test_a_cache_it_cannot_write_leaves_the_interpreter_as_it_is(tmp_path: Path) -> None:
    """A read-only cache directory costs slower worker starts, never the job."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    host = SparkHost(cache_dir=blocked / "cache")  # below a file: cannot be made
    assert worker_python(local=True, host=host) == sys.executable
