"""The jar cache: which pom Maven gets, and when a cache counts as complete, so that a second run
needs no Maven (and no network) and a half-finished fetch is never taken for a whole one."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ingest.kafka.apache_kafka import kafka_artifacts
from ingest.kafka.maven import (
    STAMP_NAME,
    JarFetchError,
    MavenArtifact,
    fetch_jars,
    is_complete,
    pom_xml,
    write_stamp,
)

NS = {"m": "http://maven.apache.org/POM/4.0.0"}
ARTIFACTS = (
    MavenArtifact("org.example", "server", "1.0"),
    MavenArtifact("org.example", "logging", "2.0"),
)


def _lib(tmp_path: Path, jars: dict[str, bytes]) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    for name, content in jars.items():
        (lib / name).write_bytes(content)
    return lib


def test_the_pom_asks_for_each_artifact_as_a_direct_dependency() -> None:
    pom = ET.fromstring(pom_xml(kafka_artifacts("4.4.0")))

    found = [
        tuple(
            d.findtext(f"m:{field}", namespaces=NS)
            for field in ("groupId", "artifactId", "version")
        )
        for d in pom.iterfind("m:dependencies/m:dependency", NS)
    ]
    assert found[0] == ("org.apache.kafka", "kafka_2.13", "4.4.0")
    assert {a for _, a, _ in found} == {"kafka_2.13", "slf4j-api", "log4j-slf4j2-impl"}
    assert pom.findtext("m:packaging", namespaces=NS) == "pom"


def test_the_pom_escapes_what_xml_would_misread() -> None:
    pom = ET.fromstring(pom_xml([MavenArtifact("g", "a", "1.0&<x>")]))
    assert pom.findtext("m:dependencies/m:dependency/m:version", namespaces=NS) == "1.0&<x>"


def test_a_pom_needs_an_artifact() -> None:
    with pytest.raises(ValueError, match="no artifacts"):
        pom_xml([])


def test_a_stamped_lib_is_complete_for_the_same_artifacts_in_any_order(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc", "logging-2.0.jar": b"de"})
    write_stamp(lib, ARTIFACTS)

    assert is_complete(lib, ARTIFACTS)
    assert is_complete(lib, tuple(reversed(ARTIFACTS)))


def test_a_lib_without_its_stamp_is_not_complete(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc"})
    assert not is_complete(lib, ARTIFACTS)
    assert not is_complete(tmp_path / "missing", ARTIFACTS)


def test_other_artifacts_need_another_fetch(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc"})
    write_stamp(lib, ARTIFACTS)

    newer = (MavenArtifact("org.example", "server", "1.1"), ARTIFACTS[1])
    assert not is_complete(lib, newer)


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_missing_or_truncated_jar_makes_the_cache_incomplete(tmp_path: Path, damage: str) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc", "logging-2.0.jar": b"de"})
    write_stamp(lib, ARTIFACTS)

    if damage == "deleted":
        (lib / "server-1.0.jar").unlink()
    else:
        (lib / "server-1.0.jar").write_bytes(b"a")
    assert not is_complete(lib, ARTIFACTS)


def test_a_garbled_stamp_makes_the_cache_incomplete(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc"})
    (lib / STAMP_NAME).write_text("{not json")
    assert not is_complete(lib, ARTIFACTS)
    (lib / STAMP_NAME).write_text(json.dumps({"artifacts": [], "jars": []}))
    assert not is_complete(lib, ARTIFACTS)


def test_a_stamp_of_an_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JarFetchError, match="no jars"):
        write_stamp(_lib(tmp_path, {}), ARTIFACTS)


def test_a_complete_cache_is_used_without_running_maven(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc"})
    write_stamp(lib, ARTIFACTS)

    assert fetch_jars(ARTIFACTS, lib, mvn=tmp_path / "no-such-mvn") == lib


def test_an_incomplete_cache_without_maven_says_what_is_missing(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"server-1.0.jar": b"abc"})

    with pytest.raises(JarFetchError, match="no Maven"):
        fetch_jars(ARTIFACTS, lib, mvn=tmp_path / "no-such-mvn")
    assert (lib / "server-1.0.jar").exists(), "a failed fetch leaves the old cache alone"
