"""The ``_ls_seq`` source position: byte order must be source order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.debezium import (
    SEQ_COLUMN,
    DeadLetterReason,
    DecoderConfig,
    binlog_position,
    decode_records,
    postgres_position,
)
from ingest.debezium.position import encode_position
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    customer,
    mysql_source,
    payload,
    pg_source,
    record,
    value,
)

TABLE = "public.customers"
U64 = st.integers(0, 2**64 - 1)
U32 = st.integers(0, 2**32 - 1)


def seq_of(source: dict | None, *, offset: int = 0, ts_ms: int | None = None) -> bytes:
    body = payload("u", after=customer(1), source=source, ts_ms=ts_ms)
    if source is None:
        body["source"] = None
    batch = decode_records([record(value(body, CUSTOMER_FIELDS), offset=offset)], DecoderConfig())
    assert batch.dead_letters == ()
    return batch.table(TABLE).rows.column(SEQ_COLUMN).to_pylist()[0]


def test_postgres_position_is_the_lsn_big_endian() -> None:
    assert seq_of(pg_source(0x0102030405060708)) == bytes(range(1, 9)) + bytes(8)


def test_a_later_lsn_sorts_after_an_earlier_one_across_byte_boundaries() -> None:
    assert seq_of(pg_source(255)) < seq_of(pg_source(256)) < seq_of(pg_source(2**40))


def test_postgres_without_lsn_falls_back_to_the_sequence() -> None:
    source = pg_source(None)
    source["sequence"] = '["100","200"]'
    assert seq_of(source) == bytes(8) + (200).to_bytes(8, "big")


def test_mysql_position_is_file_pos_row() -> None:
    seq = seq_of(mysql_source("mysql-bin.000003", 154, 2))
    assert seq == (3).to_bytes(4, "big") + (154).to_bytes(8, "big") + (2).to_bytes(4, "big")


def test_mysql_binlog_rollover_sorts_after_the_old_file() -> None:
    old_file_late = seq_of(mysql_source("mysql-bin.000009", 2**40, 7))
    new_file_early = seq_of(mysql_source("mysql-bin.000010", 4, 0))
    assert old_file_late < new_file_early


def test_mysql_rows_of_one_event_are_ordered_by_row() -> None:
    assert seq_of(mysql_source("b.000001", 900, 0)) < seq_of(mysql_source("b.000001", 900, 1))


def test_without_source_the_event_time_and_offset_order_events() -> None:
    assert seq_of(None, ts_ms=5, offset=9) == (5).to_bytes(8, "big") + (9).to_bytes(8, "big")
    assert seq_of(None, ts_ms=5, offset=9) < seq_of(None, ts_ms=5, offset=10)
    assert seq_of(None, ts_ms=5, offset=99) < seq_of(None, ts_ms=6, offset=0)


def test_fallback_uses_source_ts_when_the_envelope_has_none() -> None:
    source = {"connector": "sqlserver", "ts_ms": 77}
    assert seq_of(source, ts_ms=None, offset=1) == (77).to_bytes(8, "big") + (1).to_bytes(8, "big")


def test_replayed_snapshot_does_not_beat_a_later_change() -> None:
    change = seq_of(pg_source(5_000))
    snapshot_replayed = seq_of(pg_source(4_000, snapshot="true"))
    assert snapshot_replayed < change


@pytest.mark.parametrize(
    "source",
    [
        pytest.param({"lsn": -1}, id="negative-lsn"),
        pytest.param({"lsn": 1.5}, id="float-lsn"),
        pytest.param({"lsn": "0/16B3748"}, id="textual-lsn"),
        pytest.param({"file": "mysql-bin.index", "pos": 4}, id="binlog-without-number"),
        pytest.param({"file": "mysql-bin.000001", "pos": -4}, id="negative-pos"),
        pytest.param({"sequence": "[null]"}, id="empty-sequence"),
        pytest.param({"ts_ms": "yesterday"}, id="textual-ts"),
    ],
)
def test_a_position_that_cannot_be_encoded_is_a_dead_letter(source: dict) -> None:
    body = payload("u", after=customer(1), source=source, ts_ms=None)
    batch = decode_records([record(value(body, CUSTOMER_FIELDS))], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.BAD_POSITION]


def test_an_lsn_beyond_64_bits_is_a_dead_letter() -> None:
    # orjson reads integers beyond 64 bits as floats; such an LSN must not wrap around.
    body = payload("u", after=customer(1), source={"lsn": 123_456_789})
    raw = value(body, CUSTOMER_FIELDS).replace(b"123456789", b"18446744073709551616")
    batch = decode_records([record(raw)], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.BAD_POSITION]


@given(U64, U64)
def test_postgres_byte_order_is_lsn_order(first: int, second: int) -> None:
    assert (postgres_position(first) < postgres_position(second)) == (first < second)


@given(st.tuples(U32, U64, U32), st.tuples(U32, U64, U32))
def test_mysql_byte_order_is_binlog_order(
    first: tuple[int, int, int], second: tuple[int, int, int]
) -> None:
    assert (binlog_position(*first) < binlog_position(*second)) == (first < second)


@given(st.tuples(st.integers(0, 2**63 - 1), U64), st.tuples(st.integers(0, 2**63 - 1), U64))
def test_fallback_byte_order_is_time_then_offset_order(
    first: tuple[int, int], second: tuple[int, int]
) -> None:
    def encode(position: tuple[int, int]) -> bytes:
        return encode_position({"ts_ms": position[0]}, position[1])

    assert (encode(first) < encode(second)) == (first < second)


@given(U32, U64, U32)
def test_binlog_file_name_parsing_matches_the_number(number: int, pos: int, row: int) -> None:
    source = {"file": f"mysql-bin.{number:06d}", "pos": pos, "row": row}
    assert encode_position({"source": source}, 0) == binlog_position(number, pos, row)
