"""Topic to table mapping, and topics that carry no row changes."""

from __future__ import annotations

import orjson
import pytest

from ingest.debezium import DeadLetterReason, DecoderConfig, DecoderConfigError, decode_records
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    customer,
    payload,
    pg_source,
    record,
    value,
)

CREATE = value(payload("c", after=customer(1), source=pg_source(10)), CUSTOMER_FIELDS)


def tables_for(topic: str, config: DecoderConfig | None = None) -> tuple[str, ...]:
    batch = decode_records([record(CREATE, topic=topic)], config or DecoderConfig())
    return batch.table_names


@pytest.mark.parametrize(
    ("topic", "table"),
    [
        ("dbserver1.public.customers", "public.customers"),
        ("dbserver1.inventory.Orders", "inventory.orders"),
        ("my.dotted.prefix.sales.items", "sales.items"),
        ("sqlserver1.testDB.dbo.customers", "dbo.customers"),
    ],
)
def test_topic_convention_gives_namespace_and_table(topic: str, table: str) -> None:
    assert tables_for(topic) == (table,)


def test_namespace_can_be_renamed() -> None:
    config = DecoderConfig(namespaces={"public": "crm"})
    assert tables_for("dbserver1.public.customers", config) == ("crm.customers",)


def test_explicit_mapping_wins() -> None:
    config = DecoderConfig(topic_tables={"dbserver1.public.customers": "lake.people"})
    assert tables_for("dbserver1.public.customers", config) == ("lake.people",)


def test_explicit_mapping_rescues_an_unconventional_topic() -> None:
    config = DecoderConfig(topic_tables={"customers-cdc": "crm.customers"})
    assert tables_for("customers-cdc", config) == ("crm.customers",)


@pytest.mark.parametrize(
    "topic",
    [
        "__debezium-heartbeat.dbserver1",
        "dbserver1",
        "dbserver1.transaction",
    ],
)
def test_heartbeat_schema_change_and_transaction_topics_are_ignored(topic: str) -> None:
    heartbeat = orjson.dumps({"ts_ms": 1_718_000_000_000})
    schema_change = orjson.dumps({"source": {"server": "dbserver1"}, "ddl": "ALTER TABLE x"})
    records = [record(heartbeat, topic=topic), record(schema_change, topic=topic, offset=1)]
    batch = decode_records(records, DecoderConfig())
    assert (batch.ignored, batch.dead_letters, batch.tables) == (2, (), ())


def test_configured_ignored_topics() -> None:
    config = DecoderConfig(ignored_topics=frozenset({"dbserver1.public.audit"}))
    batch = decode_records([record(CREATE, topic="dbserver1.public.audit")], config)
    assert (batch.ignored, batch.tables) == (1, ())


@pytest.mark.parametrize("topic", ["dbserver1.customers", "dbserver1.public.order-items"])
def test_unmappable_topic_is_a_dead_letter_asking_for_a_mapping(topic: str) -> None:
    batch = decode_records([record(CREATE, topic=topic)], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.UNMAPPED_TOPIC]
    assert "topic_tables" in batch.dead_letters[0].error


def test_several_topics_in_one_batch() -> None:
    records = [
        record(CREATE, topic="dbserver1.public.customers"),
        record(CREATE, topic="__debezium-heartbeat.dbserver1", offset=1),
        record(CREATE, topic="dbserver1.public.customers_archive", offset=2),
    ]
    batch = decode_records(records, DecoderConfig())
    assert batch.table_names == ("public.customers", "public.customers_archive")
    assert batch.ignored == 1


@pytest.mark.parametrize("name", ["customers", "a.b.c", "1ns.t", ""])
def test_mapping_to_an_invalid_table_name_is_refused(name: str) -> None:
    with pytest.raises(DecoderConfigError):
        DecoderConfig(topic_tables={"t": name})
