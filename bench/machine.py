"""What every benchmark records about the machine it ran on: git head, CPU model, memory.

Free of heavy imports so that script-style benchmarks (bench/commit) can use it too.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def git_head() -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        check=False,
    )
    return found.stdout.strip() or "unknown"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def ram_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    return 0.0


def java_version() -> str:
    """The first line of ``java -version`` (quotes dropped), or what is missing."""
    java = shutil.which("java")
    if java is None:
        return "no java"
    found = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (found.stderr or found.stdout).splitlines()
    return first[0].replace('"', "") if first else "java ?"
