"""The held table's pieces: reading an event's transaction block, naming, and the round trip of
held records back into decoder-ready chunks."""

from __future__ import annotations

import orjson
import pytest

from ingest.debezium import RecordChunk
from ingest.sink.held import (
    HeldNameError,
    chunks_of,
    event_ref,
    held_rows,
    held_table_name,
    split_held,
)
from ingest.sink.task import split_for_holding
from ingest.transactions import BadTransactionMetadata


def event(txn: dict[str, object] | None, *, schema: bool = False, extra: str = "x") -> bytes:
    payload = {
        "before": None,
        "after": {"id": 1, "transaction": extra},
        "source": {"lsn": 10, "txId": 5},
        "transaction": txn,
        "op": "c",
        "ts_ms": 1,
    }
    if schema:
        envelope = {"type": "struct", "fields": [{"field": "transaction", "type": "struct"}]}
        return orjson.dumps({"schema": envelope, "payload": payload})
    return orjson.dumps(payload)


@pytest.mark.parametrize("schema", [False, True])
def test_event_ref_reads_the_envelope_block_not_a_column_of_that_name(schema: bool) -> None:
    txn = {"id": "571:53195829", "total_order": 3, "data_collection_order": 1}
    assert event_ref(event(txn, schema=schema)) == ("571", 3)


def test_event_ref_is_none_for_events_without_metadata_and_tombstones() -> None:
    assert event_ref(event(None)) is None
    assert event_ref(None) is None
    assert event_ref(b'{"op":"r","after":{"id":1}}') is None


def test_event_ref_takes_fields_in_any_order_and_spacing() -> None:
    value = b'{"op":"u", "transaction" : { "total_order": 2, "id": "abc" }}'
    assert event_ref(value) == ("abc", 2)


@pytest.mark.parametrize(
    "block",
    [
        b'{"id":5,"total_order":1}',
        b'{"id":"9","total_order":0}',
        b'{"id":"9","total_order":99999999999}',
        b'{"id":"9"}',
        b'{"total_order":1,"id":""}',
    ],
)
def test_a_block_that_names_no_transaction_and_rank_is_an_error_not_silence(block: bytes) -> None:
    with pytest.raises(BadTransactionMetadata):
        event_ref(b'{"op":"c","transaction":' + block + b"}")


def test_a_column_named_transaction_is_not_a_block() -> None:
    assert event_ref(b'{"after":{"transaction":"x"},"op":"c"}') is None


def test_the_envelope_block_wins_over_a_column_written_after_it() -> None:
    value = (
        b'{"transaction":{"id":"7:70","total_order":1},'
        b'"after":{"transaction":{"id":"9","total_order":2}},"op":"c"}'
    )
    assert event_ref(value) == ("7", 1)


@pytest.mark.parametrize(
    ("value", "ref"),
    [
        (b'{"op":"c","transaction":{"id":"12:5","total_order":"4"}}', ("12", 4)),
        (b'{"op":"c","transaction":{"id":"1:2:3","total_order":1}}', ("1:2:3", 1)),
        (b'{"op":"c","transaction":null} trailing', None),
        (b'{"op":"c","transaction":{"id":"5","total_order":2}} trailing', ("5", 2)),
    ],
)
def test_odd_but_readable_blocks_read_as_before(value: bytes, ref: object) -> None:
    assert event_ref(value) == ref


def test_invalid_utf8_elsewhere_in_the_event_leaves_its_block_readable() -> None:
    value = event({"id": "571:53195829", "total_order": 3}).replace(b'"x"', b'"\x80"')
    assert event_ref(value) == ("571", 3)


def test_a_block_id_that_is_not_utf8_is_an_error_not_a_crash() -> None:
    """msgspec raises UnicodeDecodeError for it (no DecodeError), and so did the raw scan:
    one such event failed its whole task, batch after batch."""
    with pytest.raises(BadTransactionMetadata, match="not UTF-8"):
        event_ref(b'{"op":"c","transaction":{"id":"a\x80b","total_order":1}}')


@pytest.mark.parametrize(
    ("block", "ref"),
    [
        (b'{"id":"a\\"b","total_order":2}', ('a"b', 2)),
        ('{"id":"١٢:٣","total_order":1}'.encode(), ("١٢", 1)),
    ],
)
def test_the_raw_scan_names_a_transaction_as_the_decoded_block_does(
    block: bytes, ref: tuple[str, int]
) -> None:
    """An event msgspec cannot read (here: text after the object) is scanned raw: the id it
    finds must be the one the END marker and the other events give (escapes read, normalised)."""
    assert event_ref(b'{"op":"c","transaction":' + block + b"}") == ref
    assert event_ref(b'{"op":"c","transaction":' + block + b"} trailing") == ref


def test_held_table_name_is_safe_and_distinct_for_unsafe_job_names() -> None:
    assert held_table_name("orders") == "lakestream_jobs.orders_held"
    dashed, underscored = held_table_name("clicks-job"), held_table_name("clicks_job")
    assert dashed != underscored
    assert dashed.startswith("lakestream_jobs.clicks_job_")
    with pytest.raises(HeldNameError):
        held_table_name("x" * 80)


def chunk(values: list[bytes | None]) -> RecordChunk:
    n = len(values)
    return RecordChunk("db.public.t", 2, list(range(100, 100 + n)), [b"k"] * n, values, [7] * n)


def test_split_for_holding_writes_published_and_untagged_events_and_holds_the_rest() -> None:
    values: list[bytes | None] = [
        event({"id": "1:10", "total_order": 1}),
        event(None),
        event({"id": "2:20", "total_order": 1}),
        event({"id": "1:30", "total_order": 2}),
    ]
    kept, held, ranks = split_for_holding([chunk(values)], frozenset({"1"}))
    assert [list(c.offsets) for c in kept] == [[100, 101, 103]]
    assert held is not None
    assert held.column("offset").to_pylist() == [102]
    assert held.column("txn_id").to_pylist() == ["2"]
    assert dict(ranks.items()) == {"1": 0b110, "2": 0b10}  # bit n: rank n seen


def test_an_event_with_a_malformed_block_passes_through_and_is_counted() -> None:
    values: list[bytes | None] = [
        event({"id": "2:20", "total_order": 1}),
        b'{"op":"c","transaction":{"id":"3","total_order":0}}',
    ]
    kept, held, ranks = split_for_holding([chunk(values)], frozenset())
    assert [list(c.offsets) for c in kept] == [[101]]
    assert held is not None and held.column("offset").to_pylist() == [100]
    assert dict(ranks.items()) == {"2": 0b10}
    assert ranks.malformed == 1


def test_a_chunk_with_nothing_to_hold_passes_unchanged() -> None:
    whole = chunk([event({"id": "1", "total_order": 1}), event(None)])
    kept, held, _ = split_for_holding([whole], frozenset({"1"}))
    assert kept == [whole]
    assert held is None


def test_held_rows_come_back_as_chunks_in_offset_order_split_by_transaction() -> None:
    a = chunk([event({"id": "9", "total_order": n}) for n in (1, 2, 3)])
    rows = held_rows(a, [(2, "9", 3), (0, "9", 1), (1, "8", 2)])
    publish, still = split_held(rows, ["9"])
    assert still.column("txn_id").to_pylist() == ["8"]
    (back,) = chunks_of(publish)
    assert (back.topic, back.partition, list(back.offsets)) == ("db.public.t", 2, [100, 102])
    assert list(back.values) == [a.values[0], a.values[2]]
