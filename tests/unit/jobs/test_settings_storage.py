"""The ``catalog.storage`` settings: an object-store warehouse and how to reach it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.compactor_settings import CompactorSettings
from jobs.ingest_config import IngestSettings
from jobs.settings import CommandSettings, ConfigError

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def test_the_environment_gives_the_store_endpoint_and_keys(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAKESTREAM_CATALOG__WAREHOUSE", "s3://lake/wh/")
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__ENDPOINT", "http://minio:9000")
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__PATH_STYLE", "false")
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__REGION", "eu-west-1")
    monkeypatch.setenv("LAKESTREAM_CATALOG__STORAGE__SECRET_KEY", SECRET)

    settings = CompactorSettings()
    storage = settings.catalog.storage

    assert settings.catalog.warehouse == "s3://lake/wh"
    assert (storage.endpoint, storage.path_style, storage.region) == (
        "http://minio:9000",
        False,
        "eu-west-1",
    )
    assert storage.secret_key is not None and storage.secret_key.get_secret_value() == SECRET
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())


def test_without_storage_settings_the_default_chain_is_used(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAKESTREAM_CATALOG__WAREHOUSE", "/local/wh")
    settings = CommandSettings()
    assert settings.catalog.warehouse == "/local/wh"
    assert settings.catalog.storage.access_key is None and settings.catalog.storage.endpoint is None


@pytest.mark.parametrize(
    ("catalog", "says"),
    [
        ({"warehouse": "s3:///no-bucket"}, "names no bucket"),
        ({"warehouse": "ftp://host/wh"}, "unknown storage scheme"),
        ({"warehouse": f"s3://key:{SECRET}@lake/wh"}, "must not carry credentials"),
        ({"warehouse": "s3://lake/wh", "storage": {"secret": "x"}}, "unknown key"),
    ],
)
def test_an_unusable_warehouse_is_one_config_error(tmp_path: Path, catalog: dict, says: str):
    path = tmp_path / "ingest.yaml"
    data = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u@db/lake", **catalog},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders"]},
        "checkpoint": "/cp",
    }
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as caught:
        IngestSettings.from_yaml(path)
    assert says in str(caught.value) and SECRET not in str(caught.value)
