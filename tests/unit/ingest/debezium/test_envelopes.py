"""Malformed messages become dead letters; one bad message never spoils the batch."""

from __future__ import annotations

import pickle

import orjson
import pyarrow as pa
import pytest

from ingest.debezium import (
    DeadLetter,
    DeadLetterReason,
    DecoderConfig,
    DecoderConfigError,
    decode_records,
)
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    CUSTOMER_KEY_FIELDS,
    customer,
    customer_change,
    field,
    key,
    numbered,
    payload,
    pg_source,
    record,
    value,
)

TABLE = "public.customers"
GOOD = value(payload("c", after=customer(1), source=pg_source(10)), CUSTOMER_FIELDS)


def envelope_with(schema: object, body: object) -> bytes:
    return orjson.dumps({"schema": schema, "payload": body})


BAD_MESSAGES = [
    pytest.param(b'{"payload": {"op": "c", ', DeadLetterReason.MALFORMED_JSON, id="truncated"),
    pytest.param(b"\xff\xfe not utf-8", DeadLetterReason.MALFORMED_JSON, id="not-utf8"),
    pytest.param(b"[1, 2]", DeadLetterReason.BAD_ENVELOPE, id="array"),
    pytest.param(b'"text"', DeadLetterReason.BAD_ENVELOPE, id="string"),
    pytest.param(envelope_with({"type": "struct"}, payload("c", after=customer(1))),
                 DeadLetterReason.BAD_ENVELOPE, id="schema-without-after"),
    pytest.param(envelope_with({"type": "struct", "fields": [
        {"field": "after", "type": "struct", "fields": [field("x", "uint128")]}]},
        payload("c", after={"x": 1})), DeadLetterReason.UNSUPPORTED_SCHEMA,
        id="unknown-connect-type"),
    pytest.param(envelope_with({"type": "struct", "fields": [
        {"field": "after", "type": "struct", "fields": [
            field("d", "bytes", logical="org.apache.kafka.connect.data.Decimal")]}]},
        payload("c", after={"d": "AA=="})), DeadLetterReason.UNSUPPORTED_SCHEMA,
        id="decimal-without-scale"),
    pytest.param(envelope_with({"type": "struct", "fields": [
        {"field": "after", "type": "int32"}]}, payload("c", after={"x": 1})),
        DeadLetterReason.UNSUPPORTED_SCHEMA, id="row-schema-not-struct"),
    pytest.param(value({**payload("d", source=pg_source(1)), "before": [1]}, CUSTOMER_FIELDS),
                 DeadLetterReason.BAD_ENVELOPE, id="before-not-object"),
    pytest.param(value({**payload("c", source=pg_source(1)), "after": "x"}, CUSTOMER_FIELDS),
                 DeadLetterReason.MISSING_ROW, id="after-not-object"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "reason"), BAD_MESSAGES)
def test_bad_message_is_a_dead_letter_between_good_ones(
    raw: bytes, reason: DeadLetterReason
) -> None:
    message_key = key({"id": 1}, CUSTOMER_KEY_FIELDS)
    records = numbered([record(GOOD, message_key), record(raw, message_key), record(GOOD)])
    batch = decode_records(records, DecoderConfig())
    assert batch.dead_letters == (
        DeadLetter(
            topic="dbserver1.public.customers", partition=0, offset=1, key=message_key,
            value=raw, reason=reason, error=batch.dead_letters[0].error, table=TABLE,
        ),
    )  # fmt: skip
    assert batch.dead_letters[0].error
    assert batch.table(TABLE).rows.num_rows == 2


def test_malformed_key_is_a_dead_letter_when_it_is_needed() -> None:
    body = payload("d", before=None, source=pg_source(1))
    batch = decode_records([record(value(body, CUSTOMER_FIELDS), b"{nope")], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.BAD_KEY]


def test_key_that_is_not_an_object_is_a_dead_letter() -> None:
    body = payload("d", before=None, source=pg_source(1))
    batch = decode_records([record(value(body, CUSTOMER_FIELDS), b"42")], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.BAD_KEY]


def test_many_bad_values_in_one_column_only_drop_their_rows() -> None:
    records = [
        customer_change("c", i, lsn=10 + i, after={**customer(i), "email": 5 if i % 3 else "ok"})
        for i in range(30)
    ]
    batch = decode_records(numbered(records), DecoderConfig())
    assert batch.table(TABLE).rows.column("id").to_pylist() == list(range(0, 30, 3))
    assert sorted(d.offset for d in batch.dead_letters) == [i for i in range(30) if i % 3]
    assert {d.reason for d in batch.dead_letters} == {DeadLetterReason.TYPE_MISMATCH}


def test_bad_values_in_two_columns_of_one_row_give_one_dead_letter() -> None:
    after = {"id": 1, "first_name": 1, "last_name": 2, "email": None}
    records = [customer_change("c", 1, lsn=1, after=after)]
    batch = decode_records(records, DecoderConfig())
    assert len(batch.dead_letters) == 1
    assert batch.tables == ()


def test_dead_letters_keep_the_raw_bytes_for_replay() -> None:
    raw = b'{"payload": null, "schema": 1, "oops"'
    message_key = b'{"id": 9}'
    batch = decode_records([record(raw, message_key, offset=41, partition=3)], DecoderConfig())
    (dead,) = batch.dead_letters
    assert (dead.topic, dead.partition, dead.offset, dead.key, dead.value) == (
        "dbserver1.public.customers", 3, 41, message_key, raw,
    )  # fmt: skip


def test_nan_float_written_as_text_by_jackson_is_accepted() -> None:
    columns = [*CUSTOMER_FIELDS, field("score", "double")]
    bodies = [
        payload("c", after={**customer(i), "score": score}, source=pg_source(i + 1))
        for i, score in enumerate(["NaN", 1.5, None])
    ]
    batch = decode_records([record(value(b, columns)) for b in bodies], DecoderConfig())
    scores = batch.table(TABLE).rows.column("score").to_pylist()
    assert scores[0] != scores[0]
    assert scores[1:] == [1.5, None]


def test_config_and_results_pickle_for_spark_executors() -> None:
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("p", pa.decimal128(9, 2))])
    config = DecoderConfig(schemas={TABLE: schema}, topic_tables={"t": "a.b"})
    assert pickle.loads(pickle.dumps(config)) == config
    batch = decode_records([record(GOOD), record(b"{")], DecoderConfig())
    assert pickle.loads(pickle.dumps(batch)) == batch


def test_config_rejects_a_schema_it_cannot_decode_into() -> None:
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("d", pa.duration("s"))])
    with pytest.raises(DecoderConfigError) as raised:
        DecoderConfig(schemas={TABLE: schema})
    assert raised.value.table == TABLE


def test_config_rejects_a_key_outside_the_schema() -> None:
    schema = pa.schema([pa.field("id", pa.int32())])
    with pytest.raises(DecoderConfigError):
        DecoderConfig(schemas={TABLE: schema}, primary_keys={TABLE: ("uuid",)})


def test_config_drops_lakestream_columns_from_a_target_schema() -> None:
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("_ls_kind", pa.int8())])
    assert DecoderConfig(schemas={TABLE: schema}).schemas[TABLE].names == ["id"]
