"""Jars from Maven Central into a local cache, fetched by the project itself, with no hand install.

Java programs that lakestream runs beside itself (the Apache Kafka broker of the tests and the
demo, :mod:`ingest.kafka.apache_kafka`) are not on PyPI. Maven resolves their dependency tree
from a generated pom (``mvn dependency:copy-dependencies``) into a directory of jars that a
``java -cp 'lib/*'`` can run; nothing else about Maven is needed at run time.

A stamp file records what a complete fetch wrote (the requested coordinates, each jar's name and
size). When it matches, :func:`fetch_jars` returns without running Maven at all, so a second run
works offline and costs no JVM start. A fetch writes into a fresh sibling directory and renames
it into place, under a file lock: pytest-xdist's workers start their brokers at the same moment,
and a half-copied ``lib/`` would give one of them a classpath with missing classes.

This module reads no environment variable: where the cache lives and which ``mvn`` runs are
parameters (``mvn`` is looked up on ``PATH`` when not given).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from catalog.logs import get_logger
from ingest.errors import IngestError

log = get_logger("lakestream.ingest.kafka")

#: Pinned, so that the same pom resolves the same way on every machine (Maven 3.8's default
#: binding is the 2.8 plugin of 2014).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
STAMP_NAME = ".lakestream-jars.json"
_FETCH_TIMEOUT_S = 900.0


class JarFetchError(IngestError, RuntimeError):
    """Maven is missing, or it could not resolve the requested artifacts."""


@dataclass(frozen=True, order=True)
class MavenArtifact:
    """One ``group:artifact:version`` whose runtime dependencies come along, unless
    ``transitive`` is false: then it comes alone (a Spark connector, whose other dependencies
    Spark's own jars already provide, in the versions Spark was built with)."""

    group: str
    artifact: str
    version: str
    transitive: bool = True

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


#: Maven 3's wildcard exclusion: the dependency alone, none of its own dependencies.
_NO_TRANSITIVES = (
    "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
)


def pom_xml(artifacts: Sequence[MavenArtifact]) -> str:
    """A minimal pom whose only purpose is to have Maven resolve ``artifacts`` for copying.

    Direct dependencies win Maven's "nearest first" mediation, which is how a caller overrides
    a version that a transitive dependency would otherwise bring (slf4j-api, say)."""
    if not artifacts:
        raise ValueError("no artifacts to fetch")
    dependencies = "".join(
        "    <dependency>"
        f"<groupId>{escape(a.group)}</groupId>"
        f"<artifactId>{escape(a.artifact)}</artifactId>"
        f"<version>{escape(a.version)}</version>"
        f"{'' if a.transitive else _NO_TRANSITIVES}"
        "</dependency>\n"
        for a in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>lakestream.local</groupId>\n"
        "  <artifactId>runtime-jars</artifactId>\n"
        "  <version>0</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n"
        f"{dependencies}"
        "  </dependencies>\n"
        "</project>\n"
    )


def _requested(artifacts: Sequence[MavenArtifact]) -> list[str]:
    return sorted(a.coordinate for a in artifacts)


def is_complete(lib: Path, artifacts: Sequence[MavenArtifact]) -> bool:
    """True when ``lib`` holds a finished fetch of exactly ``artifacts``: its stamp names them
    and every jar the stamp lists is there with its recorded size."""
    try:
        stamp = json.loads((lib / STAMP_NAME).read_text())
        if stamp["artifacts"] != _requested(artifacts):
            return False
        jars: dict[str, int] = stamp["jars"]
        return bool(jars) and all(
            (lib / name).stat().st_size == size for name, size in jars.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def write_stamp(lib: Path, artifacts: Sequence[MavenArtifact]) -> None:
    """Record what ``lib`` holds now (written last: its presence means the copy finished)."""
    jars = {p.name: p.stat().st_size for p in sorted(lib.glob("*.jar"))}
    if not jars:
        raise JarFetchError(f"no jars in {lib}")
    stamp = {"artifacts": _requested(artifacts), "jars": jars}
    (lib / STAMP_NAME).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")


def fetch_jars(
    artifacts: Sequence[MavenArtifact],
    lib: Path,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
    timeout: float = _FETCH_TIMEOUT_S,
) -> Path:
    """Make ``lib`` a directory with ``artifacts`` and their runtime dependencies; returns it.

    Maven runs only when the cache is not complete. ``maven_repo`` is Maven's local repository
    (``~/.m2/repository`` by default); ``offline`` passes ``-o`` (resolve from it alone).

    Raises:
        JarFetchError: no ``mvn``, or Maven failed (its output's tail is in the message).
    """
    if is_complete(lib, artifacts):
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with _locked(lib.parent / f".{lib.name}.lock"):
        if is_complete(lib, artifacts):  # another process fetched while this one waited
            return lib
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f".{lib.name}-", dir=lib.parent) as work:
            staging = Path(work) / "lib"
            _copy_dependencies(
                artifacts,
                Path(work),
                staging,
                mvn=mvn,
                maven_repo=maven_repo,
                offline=offline,
                timeout=timeout,
            )
            write_stamp(staging, artifacts)
            if lib.exists():
                shutil.rmtree(lib)
            staging.rename(lib)
        log.info(
            "maven_jars_fetched",
            lib=str(lib),
            artifacts=_requested(artifacts),
            jars=sum(1 for _ in lib.glob("*.jar")),
            seconds=round(time.monotonic() - started, 1),
        )
    return lib


def _copy_dependencies(
    artifacts: Sequence[MavenArtifact],
    work: Path,
    out: Path,
    *,
    mvn: Path | None,
    maven_repo: Path | None,
    offline: bool,
    timeout: float,
) -> None:
    binary = str(mvn) if mvn is not None else shutil.which("mvn")
    if binary is None or not Path(binary).is_file():
        raise JarFetchError(
            f"no Maven ('mvn') found{f' at {mvn}' if mvn else ' on PATH'}: it fetches "
            "the jars once (Debian: apt-get install maven)"
        )
    pom = work / "pom.xml"
    pom.write_text(pom_xml(artifacts))
    argv = [
        binary,
        "--batch-mode",
        "--quiet",
        "--file",
        str(pom),
        *(["--offline"] if offline else []),
        *([f"-Dmaven.repo.local={maven_repo}"] if maven_repo is not None else []),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        f"-DoutputDirectory={out}",
        "-DincludeScope=runtime",
    ]
    try:
        run = subprocess.run(
            argv,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise JarFetchError(f"mvn did not finish within {timeout}s: {' '.join(argv)}") from exc
    if run.returncode != 0:
        output = (run.stdout + run.stderr)[-3000:]
        raise JarFetchError(f"mvn failed with {run.returncode} ({' '.join(argv)}):\n{output}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, released when the block ends (or the process dies)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
