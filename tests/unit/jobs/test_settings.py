"""The commands' settings: the YAML file and the environment as two sources of one model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog import DEFAULT_HASH_BUCKETS
from jobs.compactor_settings import CompactorSettings
from jobs.ingest_config import IngestSettings
from jobs.settings import CommandSettings, ConfigError, LogLevel, config_errors

SECRET = "hunter2"


def config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job": "shop-cdc",
        "catalog": {"dsn": f"postgresql://u:{SECRET}@db/lake", "warehouse": "/wh"},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders"]},
        "checkpoint": "/cp",
    }
    return {**base, **changes}


def load(tmp_path: Path, data: dict[str, Any] | str) -> IngestSettings:
    path = tmp_path / "ingest.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return IngestSettings.from_yaml(path)


def refused(tmp_path: Path, data: dict[str, Any] | str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, data)
    message = str(caught.value)
    assert "\n" not in message and SECRET not in message
    return message


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAKESTREAM_CATALOG_DSN", "LAKESTREAM_WAREHOUSE", "LAKESTREAM_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)


def test_the_environment_overrides_the_file_key_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESTREAM_INGEST__KAFKA__BOOTSTRAP_SERVERS", "other:9092")
    monkeypatch.setenv("LAKESTREAM_CATALOG__DSN", "postgresql://env@db2/lake")
    monkeypatch.setenv("LAKESTREAM_LOG_LEVEL", "debug")
    settings = load(tmp_path, config())
    assert settings.kafka.bootstrap_servers == "other:9092"
    assert settings.catalog.dsn.get_secret_value() == "postgresql://env@db2/lake"
    assert settings.catalog.warehouse == "/wh"  # the rest of the section: the file's
    assert settings.log_level is LogLevel.DEBUG


def test_new_environment_names_win_over_the_old_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESTREAM_INGEST_SOURCE__MAX_OFFSETS_PER_TRIGGER", "5")
    assert load(tmp_path, config()).source.max_offsets_per_trigger == 5
    monkeypatch.setenv("LAKESTREAM_INGEST__SOURCE__MAX_OFFSETS_PER_TRIGGER", "7")
    assert load(tmp_path, config()).source.max_offsets_per_trigger == 7


def test_the_old_catalog_names_still_work_for_every_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKESTREAM_CATALOG_DSN", "postgresql://old@db/lake")
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", "/old")
    assert CommandSettings().catalog.required_dsn() == "postgresql://old@db/lake"
    assert CompactorSettings().catalog.warehouse == "/old"
    monkeypatch.setenv("LAKESTREAM_CATALOG__DSN", "postgresql://new@db/lake")
    assert CommandSettings().catalog.required_dsn() == "postgresql://new@db/lake"


def test_the_compactor_reads_its_section_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESTREAM_COMPACTOR__WORKERS", "6")
    assert CompactorSettings().workers == 6
    assert CompactorSettings(workers=1).workers == 1


def test_an_unknown_log_level_is_refused_before_anything_starts(tmp_path: Path) -> None:
    message = refused(tmp_path, config(log_level="verbose"))
    assert message.startswith(f"{tmp_path / 'ingest.yaml'}: log_level: ")
    assert "'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in message
    assert "LAKESTREAM_LOG_LEVEL" in message


def test_an_unknown_key_names_the_key_the_file_and_the_known_keys(tmp_path: Path) -> None:
    data = config(kafka={"bootstrap_servers": "k:9092", "bootstrap_server": "x"})
    message = refused(tmp_path, data)
    assert str(tmp_path / "ingest.yaml") in message
    assert "unknown key 'kafka.bootstrap_server'" in message
    assert "known keys here: bootstrap_servers, options" in message
    assert "FromFile" not in message and "IngestSettings" not in message


def test_a_missing_key_names_the_key_and_its_variable(tmp_path: Path) -> None:
    data = config()
    del data["checkpoint"]
    message = refused(tmp_path, data)
    assert "checkpoint is missing: set it in the file or LAKESTREAM_INGEST__CHECKPOINT" in message


@pytest.mark.parametrize("dsn", [f"postgresql://u:{SECRET}@db/lake", f"host=db password={SECRET}"])
def test_a_parsable_dsn_is_accepted(tmp_path: Path, dsn: str) -> None:
    assert load(tmp_path, config(catalog={"dsn": dsn})).catalog.required_dsn() == dsn


def test_an_unparsable_dsn_is_refused_without_showing_it(tmp_path: Path) -> None:
    message = refused(tmp_path, config(catalog={"dsn": f"{SECRET} db=lake"}))
    assert "catalog.dsn: not a PostgreSQL connection string" in message


def test_an_unparsable_dsn_in_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKESTREAM_CATALOG__DSN", f"{SECRET} nonsense")
    with (
        pytest.raises(ConfigError, match="LAKESTREAM_CATALOG__DSN") as caught,
        config_errors(CommandSettings),
    ):
        CommandSettings()
    assert SECRET not in str(caught.value)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    message = refused(tmp_path, "job: a\n  catalog: [\n")
    assert message.startswith(f"{tmp_path / 'ingest.yaml'} line 2, column 10: ")
    assert "fix the YAML syntax" in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        IngestSettings.from_yaml(tmp_path / "nope.yaml")


def test_the_file_is_read_without_a_subclass(tmp_path: Path) -> None:
    assert type(load(tmp_path, config())) is IngestSettings


def test_the_old_topic_tables_key_is_the_routes_of_the_configured_format(
    tmp_path: Path,
) -> None:
    debezium = load(tmp_path, config(tables={"topic_tables": {"t": "shop.t"}}))
    assert debezium.job_config().decoder.topic_tables == {"t": "shop.t"}
    assert debezium.notes() == [
        "tables.topic_tables is deprecated: rename it to tables.debezium_topic_tables"
    ]
    json_source = {"format": "json", "topics": ["clicks"]}
    plain = load(tmp_path, config(source=json_source, tables={"topic_tables": {"c": "l.c"}}))
    assert plain.job_config().json_tables == {"c": "l.c"}
    assert plain.job_config().decoder.topic_tables == {}
    assert "tables.json_topic_tables" in plain.notes()[0]


def test_routes_of_the_other_format_are_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, config(tables={"json_topic_tables": {"c": "l.c"}}))
    assert "tables.json_topic_tables is for source.format: json" in message
    both = {"topic_tables": {"t": "a.b"}, "debezium_topic_tables": {"t": "a.b"}}
    assert "give one" in refused(tmp_path, config(tables=both))


def test_the_hash_bucket_default_is_the_catalogs(tmp_path: Path) -> None:
    assert load(tmp_path, config()).job_config().hash_buckets == DEFAULT_HASH_BUCKETS


def test_no_dsn_says_how_to_give_one() -> None:
    with pytest.raises(ConfigError, match=r"LAKESTREAM_CATALOG__DSN .* or pass --dsn"):
        CommandSettings().catalog.required_dsn()
