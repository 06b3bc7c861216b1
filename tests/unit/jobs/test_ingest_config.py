"""`lakestream ingest --config`: what a YAML file and the environment turn into."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from ingest.debezium import LOGICAL_KEY
from ingest.sink.guard import DeadLetterGuard
from jobs.ingest_config import IngestSettings
from jobs.settings import ConfigError


def settings(
    tmp_path: Path, *, top: dict[str, object] | None = None, **source: object
) -> IngestSettings:
    config = {
        "job": "shop-cdc",
        "catalog": {"dsn": "postgresql://u:secret@db/lake", "warehouse": str(tmp_path / "wh")},
        "kafka": {"bootstrap_servers": "kafka:9092"},
        "source": {"topics": ["dbserver1.public.orders"], **source},
        "checkpoint": str(tmp_path / "cp"),
        **(top or {}),
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return IngestSettings.from_yaml(path)


def refusal(tmp_path: Path, **top: object) -> str:
    """The one line ``lakestream ingest`` prints for a configuration it refuses."""
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, top=top)
    return str(caught.value).removeprefix(f"{tmp_path / 'ingest.yaml'}: ")


CUSTOMERS = {
    "primary_key": ["id"],
    "columns": {
        "id": "int64",
        "name": "string",
        "price": "decimal(10,2)",
        "created": "timestamp[us, UTC]",
        "made": "timestamp[ms]",
        "opens": "time[ms]",
        "day": "date",
        "doc": "json",
        "tags": "list<string>",
    },
}


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
    with pytest.raises(ConfigError, match="max_offsets_per_trigger"):
        settings(tmp_path, max_offsets_per_trigger=0)


def test_a_declared_table_gives_the_decoder_its_schema_and_key(tmp_path: Path) -> None:
    config = settings(tmp_path, top={"tables": {"declare": {"Inventory.Customers": CUSTOMERS}}})
    decoder = config.job_config().decoder
    schema = decoder.schemas["inventory.customers"]
    assert schema.names == list(CUSTOMERS["columns"])  # the YAML order is the table's order
    assert [f.type for f in schema] == [
        pa.int64(), pa.string(), pa.decimal128(10, 2), pa.timestamp("us", tz="UTC"),
        pa.timestamp("ms"), pa.time64("us"), pa.date32(), pa.string(), pa.list_(pa.string()),
    ]  # fmt: skip
    # what the JSON cannot say is carried by the logical name: milliseconds, a Json column
    assert schema.field("opens").metadata[LOGICAL_KEY] == b"io.debezium.time.Time"
    assert schema.field("doc").metadata[LOGICAL_KEY] == b"io.debezium.data.Json"
    assert decoder.primary_keys["inventory.customers"] == ("id",)


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"id": "int64", "price": "decimal(10)"}, "column 'price': unknown type 'decimal(10)'"),
        ({"id": "int64", "at": "timestamp[us, Europe/Prague]"}, "write timestamp[us, UTC]"),
        ({"id": "int64", "price": "decimal(50,60)"}, "0 <= scale <= precision"),
        ({"id": "int64", "x": "varchar"}, "types are int8|int16|int32|int64"),
    ],
)
def test_an_unknown_type_is_one_line_naming_table_column_and_the_grammar(
    tmp_path: Path, columns: dict[str, str], expected: str
) -> None:
    declared = {"primary_key": ["id"], "columns": columns}
    line = refusal(tmp_path, tables={"declare": {"shop.items": declared}})
    assert line.startswith("tables.declare.shop.items: ")
    assert expected in line and "\n" not in line


def test_a_declared_key_must_be_a_declared_column(tmp_path: Path) -> None:
    declared = {"primary_key": ["sku"], "columns": {"id": "int64"}}
    line = refusal(tmp_path, tables={"declare": {"shop.items": declared}})
    assert "primary_key column 'sku' is not among the columns" in line


def test_a_declared_table_needs_a_namespace(tmp_path: Path) -> None:
    line = refusal(tmp_path, tables={"declare": {"items": CUSTOMERS}})
    assert "declared table 'items' is not a namespace.table name" in line


def test_declarations_are_for_debezium_topics(tmp_path: Path) -> None:
    line = refusal(
        tmp_path,
        source={"topics": ["clicks"], "format": "json"},
        tables={"declare": {"shop.items": CUSTOMERS}},
    )
    assert "tables.declare is for debezium topics" in line


def test_the_dead_letter_guard_is_on_by_default(tmp_path: Path) -> None:
    config = settings(tmp_path).job_config()
    assert config.dead_letter_guard == DeadLetterGuard(max_ratio=0.5, min_count=10)
    assert config.dead_letter_table == "lakestream.dead_letters"


def test_the_dead_letter_guard_is_configured_or_turned_off(tmp_path: Path) -> None:
    on = settings(tmp_path, top={"dead_letters": {"max_ratio": 0.1, "min_count": 1}})
    assert on.job_config().dead_letter_guard == DeadLetterGuard(max_ratio=0.1, min_count=1)
    off = settings(tmp_path, top={"dead_letters": {"max_ratio": None, "table": "ops.dlq"}})
    assert off.job_config().dead_letter_guard.max_ratio is None
    assert off.job_config().dead_letter_table == "ops.dlq"


def test_a_ratio_outside_zero_to_one_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, dead_letters={"max_ratio": 5})
    assert line.startswith("dead_letters.max_ratio: ")


def test_the_old_dead_letter_table_key_still_works(tmp_path: Path) -> None:
    old = settings(tmp_path, top={"dead_letter_table": "ops.dlq"})
    assert old.job_config().dead_letter_table == "ops.dlq"


def test_the_old_and_the_new_dead_letter_table_key_together_are_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, dead_letter_table="a.b", dead_letters={"table": "c.d"})
    assert "dead_letter_table is the old name of dead_letters.table" in line


def with_catalog(tmp_path: Path, **catalog: object) -> dict[str, object]:
    return {"catalog": {"dsn": "postgresql://u:secret@db/lake", **catalog}}


def test_the_outage_budget_is_five_minutes_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings(tmp_path).catalog.outage_budget == 300.0
    assert (
        settings(tmp_path, top=with_catalog(tmp_path, outage_budget=45)).catalog.outage_budget
        == 45.0
    )
    monkeypatch.setenv("LAKESTREAM_INGEST_CATALOG__OUTAGE_BUDGET", "12.5")
    assert settings(tmp_path).catalog.outage_budget == 12.5


def test_a_negative_outage_budget_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    line = refusal(tmp_path, **with_catalog(tmp_path, outage_budget=-1))
    assert line.startswith("catalog.outage_budget:") and "\n" not in line
