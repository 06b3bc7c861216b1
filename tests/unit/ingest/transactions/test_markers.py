"""Reading Debezium's transaction metadata, as Debezium 3.6 writes it (records captured from the
PostgreSQL connector with ``provide.transaction.metadata=true``)."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.debezium.position import postgres_position
from ingest.errors import IngestError
from ingest.transactions import (
    BadTransactionMetadata,
    MarkerStatus,
    TransactionMarker,
    TransactionRef,
    decode_ends,
    decode_marker,
    is_transaction_topic,
    transaction_ref,
)
from ingest.transactions.markers import TRANSACTION_TOPIC_PATTERN

BEGIN = (
    b'{"status":"BEGIN","id":"733:26386320","event_count":null,'
    b'"data_collections":null,"ts_ms":1795519514730}'
)
END = (
    b'{"status":"END","id":"733:26386680","event_count":3,"data_collections":'
    b'[{"data_collection":"public.acct","event_count":2},'
    b'{"data_collection":"public.audit","event_count":1}],"ts_ms":1795519514730}'
)
END_SCHEMA = orjson.dumps(
    {
        "schema": {
            "type": "struct",
            "name": "io.debezium.connector.common.TransactionMetadataValue",
        },
        "payload": orjson.loads(END),
    }
)


def test_an_end_marker_gives_counts_time_and_the_commit_position() -> None:
    marker = decode_marker(b'{"id":"733:26386680"}', END)

    assert marker == TransactionMarker(
        status=MarkerStatus.END,
        id="733",
        event_count=3,
        collections=(("public.acct", 2), ("public.audit", 1)),
        ts_ms=1795519514730,
        position=postgres_position(26386680).hex(),
    )


def test_the_schema_envelope_is_read_through() -> None:
    assert decode_marker(None, END_SCHEMA) == decode_marker(None, END)


def test_begin_and_its_events_name_the_transaction_like_the_end() -> None:
    """Debezium's PostgreSQL ids are ``txId:lsn`` with the LSN of each record: only the txId
    ties BEGIN, events and END together."""
    begin = decode_marker(None, BEGIN)
    event = {"transaction": {"id": "733:26386400", "total_order": 2, "data_collection_order": 2}}

    assert begin is not None and begin.status is MarkerStatus.BEGIN and begin.id == "733"
    assert begin.event_count is None and begin.position is None
    assert transaction_ref(event) == TransactionRef(id="733", total_order=2)


@pytest.mark.parametrize(
    "begin",
    [
        BEGIN,
        b'{"status":"BEGIN","id":"733:26386320","ts_ms":1795519514730}',
        orjson.dumps({"schema": {"type": "struct"}, "payload": orjson.loads(BEGIN)}),
        b'{"status": "BEGIN", "id": "733:26386320", "ts_ms": 1795519514730}',
    ],
)
def test_a_begin_reads_the_same_in_every_layout(begin: bytes) -> None:
    marker = decode_marker(None, begin)
    assert marker == TransactionMarker(MarkerStatus.BEGIN, "733", ts_ms=1795519514730)


def test_the_driver_takes_only_end_markers_in_topic_order() -> None:
    second = END.replace(b"733:", b"734:")
    ends = decode_ends([BEGIN, END, None, END_SCHEMA.replace(b"733:", b"735:"), BEGIN, second])
    assert [(m.status, m.id) for m in ends] == [
        (MarkerStatus.END, "733"),
        (MarkerStatus.END, "735"),
        (MarkerStatus.END, "734"),
    ]
    with pytest.raises(BadTransactionMetadata):
        decode_ends([BEGIN, b'{"status":"COMMIT","id":"1"}'])


def test_other_ids_are_kept_whole() -> None:
    sqlserver = END.replace(b"733:26386680", b"00000025:00000d08:0025")
    marker = decode_marker(None, sqlserver)

    assert marker is not None and marker.id == "00000025:00000d08:0025"
    assert marker.position is None


def test_a_tombstone_is_no_marker() -> None:
    assert decode_marker(b'{"id":"733:1"}', None) is None


def test_events_without_metadata_have_no_transaction() -> None:
    assert transaction_ref({"op": "r", "transaction": None}) is None
    assert transaction_ref({"op": "c"}) is None


def test_ranks_written_as_strings_are_read() -> None:
    event = {"transaction": {"id": "571", "total_order": "1", "data_collection_order": "1"}}

    assert transaction_ref(event) == TransactionRef(id="571", total_order=1)


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1]",
        b'{"status":"COMMIT","id":"1"}',
        b'{"status":"END","id":"","event_count":1}',
        b'{"status":"END","id":"1"}',
        b'{"status":"END","id":"1","event_count":-1}',
        b'{"status":"END","id":"1","event_count":1,"data_collections":[{"event_count":1}]}',
        b'{"status":"END","id":"1\x80","event_count":1}',  # msgspec: UnicodeDecodeError
        b'{"status":"END","id":"1","event_count":1,"data_collections":'
        b'[{"data_collection":"\x80","event_count":1}]}',
    ],
)
def test_bad_markers_raise_an_ingest_error_saying_why(value: bytes) -> None:
    with pytest.raises(BadTransactionMetadata) as caught:
        decode_marker(None, value)

    assert isinstance(caught.value, IngestError)
    assert caught.value.reason
    with pytest.raises(BadTransactionMetadata):
        decode_ends([value])


@pytest.mark.parametrize(
    "value",
    [
        END,
        END_SCHEMA,
        END.replace(b"733:26386680", b"00000025:00000d08:0025"),
        END.replace(b"733:26386680", b"733:x"),
        b'{"status":"END","id":"9:10","event_count":2,"data_collections":null}',
        b'{"status":"END","id":"9:10","event_count":2,"data_collections":[]}',
        b'{"id":"9:10","event_count":2,"status":"END","extra":{"a":[1]}}',
        b'{"status":"END","id":"9:10","event_count":"2","ts_ms":"5"}',
        b'{"status": "END", "id": "9:99999999999999999999", "event_count": 0}',
    ],
)
def test_the_driver_reads_every_end_as_the_whole_decode_does(value: bytes) -> None:
    """The first time and again (then its ``data_collections`` text is known)."""
    assert decode_ends([value, value]) == [decode_marker(None, value)] * 2


@pytest.mark.parametrize(
    "block",
    [
        "571",
        {"total_order": 1},
        {"id": "571", "total_order": 0},
        {"id": "571", "total_order": True},
    ],
)
def test_bad_transaction_blocks_raise(block: object) -> None:
    with pytest.raises(BadTransactionMetadata):
        transaction_ref({"transaction": block})


def test_only_marker_counts_of_the_jobs_tables_are_awaited() -> None:
    marker = decode_marker(None, END)

    assert marker is not None
    assert marker.count_for(None) == 3
    assert marker.count_for(frozenset({"public.acct"})) == 2


def test_transaction_topics_are_told_by_name() -> None:
    assert is_transaction_topic("dbserver1.transaction")
    assert not is_transaction_topic("dbserver1.public.transactions")
    assert not is_transaction_topic(".transaction")


_NAME_PARTS = st.sampled_from(["", ".", "transaction", ".transaction", "s", "public.t", "_x-1"])


@given(st.lists(_NAME_PARTS, max_size=4).map("".join))
def test_the_transaction_topic_pattern_tells_the_same_topics(topic: str) -> None:
    """The job's ``sharedTaskPattern`` (a regex the source matches) and the sink's test agree:
    a data topic taken for the transaction topic would share its task unread."""
    assert (re.fullmatch(TRANSACTION_TOPIC_PATTERN, topic) is not None) == is_transaction_topic(
        topic
    )
