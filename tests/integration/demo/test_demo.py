"""``lakestream demo`` as a user runs it: the whole pipeline through the CLI, then Ctrl-C.

The demo starts everything itself (PostgreSQL, the broker, Kafka Connect with Debezium's connector,
the ingest job and the compactor), so these tests use no fixtures but a temporary home directory.
What a user relies on: the demo ends with exit 0 after checking the lake against the source table by
table and querying two versions; and Ctrl-C mid-stream ends it with 130 and leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.procs import processes

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
TABLES = ("shop.customers", "shop.orders", "shop.payments")


def demo(home: Path, out: Path, *args: str) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "demo", "--home", str(home), *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def demo_processes(root: int, home: Path) -> dict[int, str]:
    """The demo's descendants, and the processes naming its home directory (PostgreSQL is
    detached by pg_ctl, so it is no descendant)."""
    table = processes()
    mine = {pid for pid, proc in table.items() if str(home) in proc.cmdline} | {root}
    grew = True
    while grew:
        more = {pid for pid, proc in table.items() if proc.ppid in mine} - mine
        mine |= more
        grew = bool(more)
    return {pid: table[pid].cmdline for pid in mine if pid in table and table[pid].state != "Z"}


def still_running(seen: dict[int, str]) -> dict[int, str]:
    """Which of ``seen`` still run (the same pid with the same command line)."""
    table = processes()
    return {
        pid: cmd[:160]
        for pid, cmd in seen.items()
        if pid in table and table[pid].state != "Z" and table[pid].cmdline == cmd
    }


def wait_for_output(proc: subprocess.Popen[bytes], out: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in out.read_text(errors="replace"):
        assert proc.poll() is None, f"the demo exited with {proc.returncode}:\n{out.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{out.read_text()}"
        time.sleep(0.5)


@pytest.mark.slow
def test_the_demo_streams_changes_into_the_lake_and_checks_it_against_the_source(tmp_path):
    home, out = tmp_path / "home", tmp_path / "demo.out"
    proc = demo(home, out, "--duration", "8")
    try:
        code = proc.wait(timeout=200)
    finally:
        proc.kill()
    text = out.read_text()
    assert code == 0, text[-4000:]
    for table in TABLES:
        assert re.search(rf"^  {re.escape(table)} +OK +\d+ rows, equal to the source$", text, re.M)
    assert re.search(r"^  lakestream.dead_letters +none$", text, re.M), text
    latest = re.search(r"latest, version (\d+): (\d+) orders", text)
    earlier = re.search(r"as of .* UTC \(mid-workload\), version (\d+): (\d+) orders", text)
    assert latest and earlier, text
    assert 0 < int(earlier[1]) < int(latest[1])
    rows = re.findall(r"^ +\d+  (?:\w+ +[\d.]+|\(not there\)) +(?:\w+ +[\d.]+|\(not there\))$",
                      text, re.M)  # fmt: skip
    assert rows, text  # orders side by side at both versions
    assert f"lakestream demo --explore --home {home}" in text
    assert "lakestream tables list --dsn postgresql://" in text


@pytest.mark.slow
def test_ctrl_c_mid_stream_stops_everything_with_exit_code_130(tmp_path):
    home, out = tmp_path / "home", tmp_path / "demo.out"
    proc = demo(home, out, "--duration", "120")
    try:
        # mid-stream: the snapshot is in the broker, Debezium streams, Spark runs the job
        wait_for_output(proc, out, "waiting for the ingest job's first batch", timeout=150)
        time.sleep(3)
        seen = demo_processes(proc.pid, home)
        commands = " ".join(seen.values())
        for part in ("postgres", "kafka.Kafka", "ConnectDistributed", "compactor", "ingest"):
            assert part in commands, (part, seen)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=90)
    finally:
        proc.kill()
    left = still_running(seen)
    for pid in left:  # a failed test must not leave them running either
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert code == 130, out.read_text()[-3000:]
    assert "interrupted: everything the demo started is stopped" in out.read_text()
    assert left == {}
