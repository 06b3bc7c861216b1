"""The documentation runs: README.md and every page of docs/, each on its own, its fenced
blocks top to bottom, as a new user would type them.

Each page is one test with a fresh terminal, working directory and catalog database, so a block
may depend only on earlier blocks of its own page (a page that needs tables makes them first).
How a block runs depends on its fence:

- ```python: executed in ONE namespace shared by every Python block of the page, in order, by
  one interpreter of its own (``tests/fixtures/readme_kernel.py``, like a notebook kernel) started
  from the terminal at the first Python block; before each block its working directory and
  ``os.environ`` are set to what the shell blocks before it left (a user runs ``python`` in the
  same terminal).
- ```bash / ```sh / ```console: a ``bash`` script with ``set -euo pipefail``. Exported variables
  and the working directory carry over to later blocks, as in one terminal. In ```console
  blocks only lines starting with ``$ `` are commands (with their ``\\`` continuations); the
  other lines are sample output and are not compared.
- any other language (```text for output, ```yaml, ...) is shown, not run. A fence without a
  language fails the test: say whether it runs.

A block that cannot run here gets a marker: an HTML comment on the line right before its fence.

- ``<!-- readme-test: skip: REASON -->``: not run; the reason (Docker, a cluster...) is required.
- ``<!-- readme-test: background Ns -->`` (shell blocks): a long-running service. It is started,
  must still be running after N seconds, then gets SIGTERM on its whole process group (what
  systemd and container runtimes send) and must exit 0 within a minute.

Any other marker, or a marker not followed by a fence, fails the test (see ``readme_blocks``).

What a page may assume a user has, and this test provides: a fresh temporary working
directory; a PostgreSQL server reachable with libpq's defaults (``PGHOST``/``PGPORT``/``PGUSER``
name the session's server, where the database ``lakestream`` does not exist yet); a
Kafka-protocol broker at ``$KAFKA_BOOTSTRAP_SERVERS``; the ``lakestream`` command on ``PATH``
(this tree's code); no ``LAKESTREAM_*`` variables set. A failure names the page, its line, the
section and the block, and stops the page's run: later blocks depend on earlier ones.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from ingest.kafka.apache_kafka import ApacheKafka
from jobs.localpg import LocalPostgres
from tests.fixtures.readme_blocks import PYTHON, Block, ReadmeFormatError, read_blocks

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
#: Pages under docs/ left out, with the reason.
NOT_RUN = {"docs/architecture.md": "design notes whose diagrams are fences without a language"}


def page_name(path: Path) -> str:
    """The page as messages and test ids show it: ``README.md``, ``docs/ingest.md``."""
    return path.relative_to(ROOT).as_posix()


#: The documentation pages: the README first, then every docs/ page not in NOT_RUN.
PAGES = [
    README,
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if page_name(p) not in NOT_RUN),
]
BLOCK_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
#: Variables bash sets for itself; they are not part of what a block exported.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})


@dataclass
class Terminal:
    """What carries from shell block to block: the exported environment, the directory."""

    env: dict[str, str]
    cwd: Path
    state_dir: Path


def _user_environment(tmp_path: Path, pg: LocalPostgres, broker: ApacheKafka) -> dict[str, str]:
    """The environment of a new user's terminal: PostgreSQL and a broker at hand, no settings."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    entry = bin_dir / "lakestream"
    entry.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m jobs.cli "$@"\n')
    entry.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESTREAM_", "PG"))}
    paths = [str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env.update(
        PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]]),
        PYTHONPATH=os.pathsep.join(paths),
        PGHOST="127.0.0.1",
        PGPORT=str(pg.port),
        PGUSER="postgres",
        KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
    )
    return env


def _drop_database(pg: LocalPostgres, name: str) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def numbered(block: Block) -> str:
    lines = block.text.rstrip("\n").splitlines()
    return "\n".join(f"{block.line + i:5d} | {text}" for i, text in enumerate(lines))


def fail(block: Block, what: str) -> None:
    pytest.fail(f"{block.where()} failed:\n{numbered(block)}\n--- {what.rstrip()}", pytrace=False)


# -- python ---------------------------------------------------------------------------------


class Kernel:
    """The page's Python interpreter (``tests/fixtures/readme_kernel.py``), started at its
    first block."""

    def __init__(self, terminal: Terminal) -> None:
        self.log = terminal.state_dir / "python.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fixtures.readme_kernel", str(self.log)],
            cwd=ROOT,
            env=terminal.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, block: Block, terminal: Terminal) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {
            "code": block.text,
            "filename": str(ROOT / block.page),
            "line": block.line,
            "cwd": str(terminal.cwd),
            "env": terminal.env,
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], BLOCK_TIMEOUT_S)
        if not ready:
            fail(block, f"still running after {BLOCK_TIMEOUT_S} s\n{self.output()}")
        reply = self.process.stdout.readline()
        if not reply:
            fail(block, f"python exited ({self.process.wait()})\n{self.output()}")
        error = json.loads(reply)["error"]
        if error is not None:
            fail(block, f"{error[-6000:]}\n--- output (tail)\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def close(self) -> None:
        """End the interpreter as a user would (end of input); it closes what it opened."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- shell ----------------------------------------------------------------------------------


def shell_lines(block: Block) -> list[str]:
    """The block's commands, one page line each (console: prompts only, output blanked)."""
    lines = block.text.rstrip("\n").splitlines()
    if block.lang != "console":
        return lines
    commands: list[str] = []
    continued = False
    for line in lines:
        if line.startswith("$ "):
            commands.append(line[2:])
        elif continued:
            commands.append(line)
        else:
            commands.append("")
        continued = bool(commands[-1]) and commands[-1].endswith("\\")
    return commands


def shell_script(block: Block, terminal: Terminal) -> Path:
    """The block as a script whose line numbers are the page's line numbers, saving the
    terminal's state (exported variables, directory) when it ends."""
    header = "set -euo pipefail"
    if block.background_s is not None:
        # a handler (not 'ignore', which children would inherit): bash waits for the service
        # to stop on the same SIGTERM, and the block's exit code is the service's
        header = "trap ':' TERM; " + header
    state = terminal.state_dir
    lines = [header, *[""] * (block.line - 2), *shell_lines(block)]
    lines.append(f'pwd > "{state}/cwd"; env -0 > "{state}/env"')
    script = state / f"{Path(block.page).name}-{block.line}.sh"
    script.write_text("\n".join(lines) + "\n")
    return script


def load_state(terminal: Terminal) -> None:
    env_file = terminal.state_dir / "env"
    if not env_file.exists():
        return
    pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
    terminal.env = {k: v for k, v in pairs if k not in _SHELL_OWN}
    terminal.cwd = Path((terminal.state_dir / "cwd").read_text().strip())
    env_file.unlink()


def run_shell(block: Block, terminal: Terminal) -> None:
    script = shell_script(block, terminal)
    try:
        done = subprocess.run(
            ["bash", str(script)],
            cwd=terminal.cwd,
            env=terminal.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        fail(block, f"still running after {BLOCK_TIMEOUT_S} s\n{_tail(exc.stdout, exc.stderr)}")
        return
    if done.returncode != 0:
        fail(block, f"exit code {done.returncode}\n{_tail(done.stdout, done.stderr)}")
    load_state(terminal)


def run_background(block: Block, terminal: Terminal) -> None:
    assert block.background_s is not None
    script = shell_script(block, terminal)
    log = terminal.state_dir / f"{Path(block.page).name}-{block.line}.log"
    with log.open("w") as out:
        service = subprocess.Popen(
            ["bash", str(script)],
            cwd=terminal.cwd,
            env=terminal.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, signalled as one
        )
        try:
            _expect_running(block, service, log)
            os.killpg(service.pid, signal.SIGTERM)
            code = service.wait(STOP_TIMEOUT_S)
        finally:
            if service.poll() is None:
                os.killpg(service.pid, signal.SIGKILL)
                service.wait()
    if code != 0:
        fail(block, f"exit code {code} after SIGTERM\n{log.read_text()[-4000:]}")
    load_state(terminal)


def _expect_running(block: Block, service: subprocess.Popen[bytes], log: Path) -> None:
    assert block.background_s is not None
    deadline = time.monotonic() + block.background_s
    while time.monotonic() < deadline:
        if service.poll() is not None:
            fail(
                block,
                f"exited ({service.returncode}) before {block.background_s:g} s\n"
                f"{log.read_text()[-4000:]}",
            )
        time.sleep(0.2)


def _tail(stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    def text(value: str | bytes | None) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else value or ""

    return f"stdout:\n{text(stdout)[-3000:]}\nstderr:\n{text(stderr)[-4000:]}"


# -- the test -------------------------------------------------------------------------------


def _runs_a_block(page: Path) -> bool:
    """Whether any block of ``page`` runs; a page that does not parse is run, so that its test
    reports the mistake."""
    try:
        return any(b.runs for b in read_blocks(page, page_name(page)))
    except ReadmeFormatError:
        return True


#: Pages with at least one block that runs (a page whose every block needs what the tests lack,
#: an S3 bucket or a cluster, is checked by the grammar test only).
RUN_PAGES = [page for page in PAGES if _runs_a_block(page)]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=page_name)
def test_page_runs_top_to_bottom(
    page: Path, tmp_path: Path, pg_server: LocalPostgres, kafka_broker: ApacheKafka
) -> None:
    blocks = read_blocks(page, page_name(page))
    _drop_database(pg_server, "lakestream")  # the page creates it: a fresh catalog
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    terminal = Terminal(_user_environment(tmp_path, pg_server, kafka_broker), home, state)
    kernel: Kernel | None = None
    timings: list[str] = []
    try:
        for block in (b for b in blocks if b.runs):
            started = time.monotonic()
            if block.lang in PYTHON:
                kernel = kernel or Kernel(terminal)
                kernel.run(block, terminal)
            elif block.background_s is not None:
                run_background(block, terminal)
            else:
                run_shell(block, terminal)
            timings.append(f"{block.where()}: {time.monotonic() - started:.1f} s")
    finally:
        if kernel is not None:
            kernel.close()
        print("\n".join(timings))
