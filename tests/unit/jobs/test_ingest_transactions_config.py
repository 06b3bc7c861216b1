"""The ``transactions`` section of ``lakestream ingest``'s settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ingest.transactions import OnTimeout, TransactionMode
from jobs.ingest_config import IngestSettings, describe
from jobs.settings import ConfigError


def settings(tmp_path: Path, **top: object) -> IngestSettings:
    config = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u@db/lake"},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders", "dbserver1.transaction"]},
        "checkpoint": str(tmp_path / "cp"),
        **top,
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return IngestSettings.from_yaml(path)


def test_by_default_a_job_reading_the_transaction_topic_is_consistent(tmp_path: Path) -> None:
    config = settings(tmp_path).job_config()

    assert config.transactions is TransactionMode.AUTO
    assert config.transaction_mode is TransactionMode.CONSISTENT
    assert (config.max_hold_s, config.on_timeout) == (300.0, OnTimeout.WAIT)
    assert describe(settings(tmp_path))["transaction_mode"] == "consistent"


def test_the_section_sets_mode_hold_and_timeout(tmp_path: Path) -> None:
    section = {"mode": "eventual", "max_hold_s": 30, "on_timeout": "publish"}
    config = settings(tmp_path, transactions=section).job_config()

    assert config.transaction_mode is TransactionMode.EVENTUAL
    assert (config.max_hold_s, config.on_timeout) == (30.0, OnTimeout.PUBLISH)


def test_the_mode_alone_may_be_written(tmp_path: Path) -> None:
    config = settings(tmp_path, transactions="eventual").job_config()

    assert config.transaction_mode is TransactionMode.EVENTUAL


def test_the_environment_sets_each_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESTREAM_INGEST__TRANSACTIONS__MODE", "eventual")
    monkeypatch.setenv("LAKESTREAM_INGEST__TRANSACTIONS__ON_TIMEOUT", "publish")
    monkeypatch.setenv("LAKESTREAM_INGEST__TRANSACTIONS__MAX_HOLD_S", "12.5")

    config = settings(tmp_path, transactions={"mode": "consistent"}).job_config()

    assert config.transactions is TransactionMode.EVENTUAL
    assert (config.max_hold_s, config.on_timeout) == (12.5, OnTimeout.PUBLISH)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"mode": "strict"}, "transactions.mode: Input should be 'auto', 'consistent' or"),
        ({"max_hold_s": 0}, "transactions.max_hold_s: Input should be greater than 0"),
        ({"on_timeout": "drop"}, "transactions.on_timeout: Input should be 'wait' or 'publish'"),
        ({"hold": 5}, "unknown key 'transactions.hold' (known keys here: mode, max_hold_s"),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_key_and_variable(
    tmp_path: Path, section: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, transactions=section)

    assert message in str(caught.value)
    if "unknown" not in message:
        assert "LAKESTREAM_INGEST__TRANSACTIONS__" in str(caught.value)


def test_consistent_plain_json_topics_are_refused(tmp_path: Path) -> None:
    source = {"format": "json", "topics": ["clicks"]}

    with pytest.raises(ConfigError, match="consistent needs Debezium topics"):
        settings(tmp_path, source=source, transactions="consistent")
