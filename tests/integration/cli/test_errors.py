"""Every way a user's first commands fail: one line on stderr, the exit code, what to do.

The real ``lakestream`` entry point runs in a subprocess, as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

SECRET = "hunter2"
#: Nothing listens on port 1: a command that tried to connect would wait for its timeout.
NOWHERE = f"postgresql://u:{SECRET}@127.0.0.1:1/db?connect_timeout=3"
ENTRY = shutil.which("lakestream", path=str(Path(sys.executable).parent))


def lakestream(
    *args: str, dsn: str | None = None, debug: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTREAM_")}
    if dsn is not None:
        base["LAKESTREAM_CATALOG_DSN"] = dsn
    command = [ENTRY] if ENTRY else [sys.executable, "-m", "jobs.cli"]
    return subprocess.run(
        [*command, *(["--debug"] if debug else []), *args],
        env={**base, **env},
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single stderr line of a failed command; a password never in it."""
    lines = result.stderr.splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert SECRET not in result.stderr + result.stdout
    return lines[0]


def ingest_yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ingest.yaml"
    path.write_text(text)
    return str(path)


def good_config(tmp_path: Path, **changes: object) -> str:
    data = {
        "job": "shop",
        "catalog": {"dsn": NOWHERE},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "source": {"topics": ["t"]},
        "checkpoint": str(tmp_path / "cp"),
        **changes,
    }
    return ingest_yaml(tmp_path, yaml.safe_dump(data, sort_keys=False))


def test_no_dsn_says_which_variable_or_flag_to_set():
    line = one_line(lakestream("tables", "list"), 2)
    assert "no catalog database" in line
    assert "LAKESTREAM_CATALOG__DSN" in line and "--dsn" in line


def test_a_bad_namespace_is_one_line(catalog_dsn):
    line = one_line(lakestream("tables", "list", "bad namespace!", dsn=catalog_dsn), 1)
    assert "bad namespace!" in line and "invalid name" in line


def test_a_bad_limit_is_refused_before_any_query():
    with socket.create_server(("127.0.0.1", 0)) as catalog:  # a catalog that sees connections
        port = catalog.getsockname()[1]
        dsn = f"postgresql://u:{SECRET}@127.0.0.1:{port}/db?connect_timeout=2"
        result = lakestream("tables", "history", "shop.orders", "--limit", "-1", dsn=dsn)
        catalog.setblocking(False)
        with pytest.raises(BlockingIOError):
            catalog.accept()  # nobody connected
    line = one_line(result, 2)
    assert "--limit" in line and "lakestream tables history --help" in line


def test_an_unparsable_dsn_fails_at_once_without_showing_it():
    started = time.monotonic()
    line = one_line(lakestream("tables", "list", dsn=f"{SECRET} not-a-dsn"), 2)
    assert "not a PostgreSQL connection string" in line and "LAKESTREAM_CATALOG" in line
    flag = one_line(lakestream("tables", "list", "--dsn", f"host=h password={SECRET} dbname"), 2)
    assert "catalog.dsn" in flag
    # parsed, not retried as an unreachable database (which takes 10 s per command)
    assert time.monotonic() - started < 18


def test_malformed_ingest_yaml_names_the_file_and_line(tmp_path):
    path = ingest_yaml(tmp_path, "job: shop\n  catalog: [\n")
    line = one_line(lakestream("ingest", "--config", path), 2)
    assert f"{path} line 2, column 10" in line and "fix the YAML syntax" in line


def test_an_unknown_key_names_the_key_and_the_file(tmp_path):
    path = good_config(tmp_path, kafak={"bootstrap_servers": "x"})
    line = one_line(lakestream("ingest", "--config", path), 2)
    assert path in line and "unknown key 'kafak'" in line and "known keys here:" in line
    assert "FromFile" not in line and "validation error" not in line


def test_an_unknown_log_level_is_a_configuration_error(tmp_path):
    line = one_line(lakestream("ingest", "--config", good_config(tmp_path, log_level="verbose")), 2)
    assert "log_level" in line and "'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in line
    env = one_line(lakestream("tables", "list", dsn=NOWHERE, LAKESTREAM_LOG_LEVEL="verbose"), 2)
    assert "LAKESTREAM_LOG_LEVEL" in env


def test_a_missing_config_file_is_one_line(tmp_path):
    line = one_line(lakestream("ingest", "--config", str(tmp_path / "nope.yaml")), 2)
    assert "no such file" in line


def test_a_missing_table_is_a_runtime_failure_with_a_hint(catalog_dsn):
    line = one_line(lakestream("tables", "describe", "shop.nothing", dsn=catalog_dsn), 1)
    assert "does not exist" in line and "lakestream tables list" in line


def test_debug_shows_the_traceback(tmp_path):
    path = ingest_yaml(tmp_path, "job: shop\n  catalog: [\n")
    for result in (
        lakestream("ingest", "--config", path, debug=True),
        lakestream("ingest", "--config", path, LAKESTREAM_DEBUG="1"),
    ):
        assert result.returncode == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stderr.splitlines()[-1].startswith("error: ")


def test_help_documents_the_exit_codes():
    result = lakestream("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "Exit codes: 0 done; 1 a failure at run time" in text
    assert "2 a usage or configuration mistake" in text
