"""``source.converter: avro``: the schema registry's settings, checked when the file is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ingest.config import IngestJobConfig
from ingest.debezium import DecoderConfig
from ingest.debezium.avro import AvroDecoding
from ingest.transactions import TransactionConfigError, TransactionMode
from jobs.ingest_config import IngestSettings, describe
from jobs.settings import ConfigError

REGISTRY = {"url": "http://registry:8080/apis/ccompat/v7"}


def settings(tmp_path: Path, **top: object) -> IngestSettings:
    config = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u:secret@db/lake", "warehouse": str(tmp_path / "wh")},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders"], "converter": "avro"},
        "schema_registry": REGISTRY,
        "checkpoint": str(tmp_path / "cp"),
        **top,
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return IngestSettings.from_yaml(path)


def refusal(tmp_path: Path, **top: object) -> str:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, **top)
    return str(caught.value)


def test_the_registry_reaches_the_decoder_and_the_log_shows_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "LAKESTREAM_INGEST_SCHEMA_REGISTRY__OPTIONS", '{"basic.auth.user.info": "lake:s3cret"}'
    )
    configured = settings(tmp_path)
    avro = configured.job_config().decoder.avro
    assert avro is not None
    assert avro.registry_url == REGISTRY["url"]
    assert avro.client_config()["basic.auth.user.info"] == "lake:s3cret"
    logged = describe(configured)
    assert logged["converter"] == "avro" and logged["schema_registry"] == REGISTRY["url"]
    assert "s3cret" not in repr(logged) and "s3cret" not in repr(configured.job_config())


def test_json_stays_the_default_and_needs_no_registry(tmp_path: Path) -> None:
    plain = settings(tmp_path, source={"topics": ["a.b.c"]}, schema_registry=None)
    assert plain.job_config().decoder.avro is None


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"schema_registry": None}, "source.converter: avro needs schema_registry.url"),
        (
            {"source": {"topics": ["a.b.c"]}},
            "schema_registry is read only with source.converter: avro",
        ),
        (
            {"source": {"topics": ["t"], "converter": "avro", "format": "json"}},
            "source.converter: avro is for Debezium topics",
        ),
        ({"schema_registry": {"url": "registry:8080"}}, "schema registry url must be http"),
        (
            {"schema_registry": {**REGISTRY, "options": {"basic.auth.userinfo": "x"}}},
            "Unrecognized properties: basic.auth.userinfo",
        ),
        ({"transactions": "consistent"}, "not available with source.converter: avro"),
        ({"source": {"topics": ["t"], "converter": "protobuf"}}, "converter"),
    ],
)
def test_mistakes_are_refused_when_the_file_is_read(
    tmp_path: Path, top: dict[str, object], expected: str
) -> None:
    assert expected in refusal(tmp_path, **top)


def test_an_avro_job_publishes_eventually_even_with_a_transaction_topic() -> None:
    decoder = DecoderConfig(avro=AvroDecoding.of("http://registry:8080"))
    topics = ("dbserver1.public.orders", "dbserver1.transaction")
    config = IngestJobConfig("j", "k:9092", Path("cp"), "lake.dead", topics=topics, decoder=decoder)
    assert config.transaction_mode is TransactionMode.EVENTUAL
    with pytest.raises(TransactionConfigError, match=r"source\.converter: avro"):
        IngestJobConfig(
            "j", "k:9092", Path("cp"), "lake.dead", topics=topics, decoder=decoder,
            transactions=TransactionMode.CONSISTENT,
        )  # fmt: skip
