"""`lakestream ingest --config`: what a YAML file and the environment turn into."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from jobs.ingest_config import IngestSettings


def settings(tmp_path: Path, **source: object) -> IngestSettings:
    config = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u:secret@db/lake", "warehouse": str(tmp_path / "wh")},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders"], **source},
        "checkpoint": str(tmp_path / "cp"),
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config))
    return IngestSettings.from_yaml(path)


def test_a_batch_is_bounded_by_default_so_a_backlog_cannot_fill_a_task(tmp_path: Path) -> None:
    assert settings(tmp_path).job_config().max_offsets_per_trigger == 1_000_000
    assert (
        settings(tmp_path, max_offsets_per_trigger=5000).job_config().max_offsets_per_trigger
        == 5000
    )
    assert (
        settings(tmp_path, max_offsets_per_trigger=None).job_config().max_offsets_per_trigger
        is None
    )


def test_the_environment_overrides_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESTREAM_INGEST_SOURCE__MAX_OFFSETS_PER_TRIGGER", "777")
    assert settings(tmp_path).job_config().max_offsets_per_trigger == 777


def test_a_bad_limit_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="max_offsets_per_trigger"):
        settings(tmp_path, max_offsets_per_trigger=0)
