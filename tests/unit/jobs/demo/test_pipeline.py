"""``lakestream demo`` registers the deployment's ``docker/connector.json``: a copy without it
(an installed wheel) stops before starting anything, with one line and the set-up exit code."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from jobs.demo import debezium, pipeline


def test_the_demo_uses_the_deployments_connector_file() -> None:
    root = Path(__file__).resolve().parents[4]
    assert debezium.CONNECTOR_JSON.relative_to(root) == Path("docker/connector.json")
    assert debezium.CONNECTOR_JSON.is_file()


def test_without_the_connector_file_the_demo_stops_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("find_java", "ensure_kafka_jars", "ensure_connect_jars", "ensure_postgres_plugin"):
        monkeypatch.setattr(pipeline, name, lambda: None)  # the jars: not what is tested here
    monkeypatch.setattr(pipeline, "CONNECTOR_JSON", tmp_path / "connector.json")

    code = pipeline.run(pipeline.DemoConfig(home=tmp_path / "home"), io.StringIO())

    assert code == pipeline.EXIT_SETUP
    assert "run the demo from a clone" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()
