"""The throwaway broker of the tests, the benchmarks and the demo does not outlive the process
that started it, however that process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.procs import processes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
STARTER = """
import os, signal
from ingest.kafka.localbroker import LocalBroker
broker = LocalBroker.start()
print(broker.process.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no finally, no stop()
"""


def _alive(pid: int) -> bool:
    proc = processes().get(pid)
    return proc is not None and proc.state != "Z"  # a zombie has exited


def test_a_broker_dies_with_the_process_that_started_it_killed_with_9() -> None:
    starter = [sys.executable, "-c", STARTER]
    run = subprocess.run(starter, check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == -signal.SIGKILL, run.stderr
    pid = int(run.stdout.split()[0])
    try:
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the broker outlived the process that started it"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
