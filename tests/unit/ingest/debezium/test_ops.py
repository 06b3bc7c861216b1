"""Operations: creates, snapshot reads, updates, deletes, tombstones and primary-key changes."""

from __future__ import annotations

import pytest

from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT, UNSET_COLUMN
from ingest.debezium import (
    SEQ_COLUMN,
    DeadLetterReason,
    DecoderConfig,
    decode_records,
    postgres_position,
)
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    CUSTOMER_KEY_FIELDS,
    b64,
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


def rows_of(records: list, config: DecoderConfig | None = None) -> list[dict]:
    batch = decode_records(numbered(records), config or DecoderConfig())
    assert batch.dead_letters == ()
    return batch.table(TABLE).rows.to_pylist()


@pytest.mark.parametrize("op", ["c", "r", "u"])
def test_create_read_and_update_upsert_the_after_image(op: str) -> None:
    after = customer(1001, "sally@example.com")
    before = customer(1001, "old@example.com") if op == "u" else None
    rows = rows_of([customer_change(op, 1001, lsn=500, before=before, after=after)])
    assert rows == [{**after, ROW_KIND_COLUMN: ROW_KIND_UPSERT, SEQ_COLUMN: postgres_position(500)}]


def test_update_without_before_image_is_a_normal_upsert() -> None:
    # PostgreSQL's default REPLICA IDENTITY sends updates with before = null.
    rows = rows_of([customer_change("u", 7, lsn=900, before=None, after=customer(7, "x@y.z"))])
    assert rows[0]["email"] == "x@y.z"
    assert rows[0][ROW_KIND_COLUMN] == ROW_KIND_UPSERT


def test_delete_keeps_only_the_key_and_nulls_placeholders() -> None:
    # Default replica identity: before holds the key, other NOT NULL columns get placeholders.
    before = {"id": 1001, "first_name": "", "last_name": "", "email": None}
    rows = rows_of([customer_change("d", 1001, lsn=700, before=before)])
    assert rows == [
        {
            "id": 1001,
            "first_name": None,
            "last_name": None,
            "email": None,
            ROW_KIND_COLUMN: ROW_KIND_DELETE,
            SEQ_COLUMN: postgres_position(700),
        }
    ]


def test_delete_with_full_before_image_still_nulls_non_key_columns() -> None:
    rows = rows_of([customer_change("d", 5, lsn=710, before=customer(5, "keep@me.not"))])
    assert rows[0]["email"] is None
    assert rows[0]["first_name"] is None


def test_delete_without_before_takes_the_key_from_the_message_key() -> None:
    rows = rows_of([customer_change("d", 42, lsn=800, before=None)])
    assert rows[0]["id"] == 42
    assert rows[0][ROW_KIND_COLUMN] == ROW_KIND_DELETE


def test_delete_without_before_and_schemaless_key() -> None:
    body = payload("d", before=None, source=pg_source(801))
    message = record(value(body, CUSTOMER_FIELDS), key({"id": 43}))
    assert rows_of([message])[0]["id"] == 43


def test_primary_key_comes_from_the_key_schema() -> None:
    batch = decode_records([customer_change("c", 1, lsn=10, after=customer(1))], DecoderConfig())
    assert batch.table(TABLE).primary_key == ("id",)


def test_configured_primary_key_wins_over_the_message_key() -> None:
    config = DecoderConfig(primary_keys={TABLE: ("id", "email")})
    batch = decode_records([customer_change("c", 1, lsn=10, after=customer(1, "a@b"))], config)
    assert batch.table(TABLE).primary_key == ("id", "email")


def test_primary_key_change_is_a_delete_of_the_old_key_and_a_create_of_the_new() -> None:
    # UPDATE customers SET id = 2002 WHERE id = 1001: Debezium emits d(1001), tombstone, c(2002).
    records = [
        customer_change("c", 1001, lsn=100, after=customer(1001)),
        customer_change("d", 1001, lsn=200, before={"id": 1001}),
        record(None, key({"id": 1001}, CUSTOMER_KEY_FIELDS)),
        customer_change("c", 2002, lsn=200, after=customer(2002)),
    ]
    batch = decode_records(numbered(records), DecoderConfig())
    rows = batch.table(TABLE).rows.to_pylist()
    assert [(r["id"], r[ROW_KIND_COLUMN]) for r in rows] == [
        (1001, ROW_KIND_UPSERT),
        (1001, ROW_KIND_DELETE),
        (2002, ROW_KIND_UPSERT),
    ]
    assert batch.tombstones == 1
    assert batch.dead_letters == ()


@pytest.mark.parametrize("tombstone", [None, b"", b"null", b'{"schema":null,"payload":null}'])
def test_tombstones_are_counted_not_dead_lettered(tombstone: bytes | None) -> None:
    batch = decode_records(
        [record(tombstone, key({"id": 1}, CUSTOMER_KEY_FIELDS))], DecoderConfig()
    )
    assert (batch.tombstones, batch.dead_letters, batch.tables) == (1, (), ())


def test_truncate_is_a_dead_letter_not_a_silent_skip() -> None:
    body = payload("t", source=pg_source(1000))
    batch = decode_records([record(value(body, CUSTOMER_FIELDS))], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.UNSUPPORTED_OP]


@pytest.mark.parametrize("op", ["x", None, 1, ["c"], "create"])
def test_unknown_op_is_a_dead_letter(op: object) -> None:
    body = payload("c", after=customer(1), source=pg_source(1000))
    body["op"] = op
    batch = decode_records([record(value(body, CUSTOMER_FIELDS))], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.UNKNOWN_OP]


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_upsert_without_after_is_a_dead_letter(op: str) -> None:
    body = payload(op, after=None, source=pg_source(1000))
    batch = decode_records([record(value(body, CUSTOMER_FIELDS))], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.MISSING_ROW]


def test_delete_without_any_key_is_a_dead_letter() -> None:
    body = payload("d", before=None, source=pg_source(1000))
    batch = decode_records([record(value(body, CUSTOMER_FIELDS), None)], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.MISSING_KEY]


def test_delete_whose_key_value_is_missing_is_a_dead_letter() -> None:
    body = payload("d", before={"id": None}, source=pg_source(1000))
    message = record(value(body, CUSTOMER_FIELDS), key({"other": 1}, CUSTOMER_KEY_FIELDS))
    batch = decode_records([message], DecoderConfig(primary_keys={TABLE: ("id",)}))
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.MISSING_KEY]


def test_upsert_with_null_primary_key_is_a_dead_letter_and_others_survive() -> None:
    records = [
        customer_change("c", 1, lsn=10, after=customer(1)),
        customer_change("c", 2, lsn=20, after={**customer(2), "id": None}),
        customer_change("c", 3, lsn=30, after=customer(3)),
    ]
    batch = decode_records(numbered(records), DecoderConfig())
    assert batch.table(TABLE).rows.column("id").to_pylist() == [1, 3]
    assert [(d.offset, d.reason) for d in batch.dead_letters] == [(1, DeadLetterReason.MISSING_KEY)]


def test_counts_of_upserts_and_deletes() -> None:
    records = [
        customer_change("r", 1, lsn=10, after=customer(1)),
        customer_change("u", 1, lsn=20, after=customer(1, "n@e.w")),
        customer_change("d", 1, lsn=30, before={"id": 1}),
    ]
    decoded = decode_records(numbered(records), DecoderConfig()).table(TABLE)
    assert (decoded.upserts, decoded.deletes) == (2, 1)


def test_rows_keep_batch_order_and_every_change() -> None:
    # The decoder does not collapse changes of one key: the merge resolves them by _ls_seq.
    records = [customer_change("u", 1, lsn=lsn, after=customer(1, f"{lsn}@x")) for lsn in (3, 1, 2)]
    rows = rows_of(records)
    assert [r["email"] for r in rows] == ["3@x", "1@x", "2@x"]
    assert max(rows, key=lambda r: r[SEQ_COLUMN])["email"] == "3@x"


_TOASTED_FIELDS = [
    field("id", "int32", optional=False),
    field("v", "int32"),
    field("note", "string"),
    field("blob", "bytes"),
    field("tags", "array", items={"type": "string", "optional": True}),
]
_MARKER = "__debezium_unavailable_value"


def test_unchanged_toasted_values_make_a_partial_row_naming_the_columns_left_out() -> None:
    # Default REPLICA IDENTITY: an UPDATE that leaves TOASTed columns alone sends placeholders,
    # as text, base64 bytes or a one-element array depending on the column type.
    full = {"id": 1, "v": 0, "note": "long", "blob": b64(b"\x00big"), "tags": ["a"]}
    partial = {"id": 1, "v": 1, "note": _MARKER, "blob": b64(_MARKER.encode()), "tags": [_MARKER]}
    events = [
        record(value(payload("u", after=after, source=pg_source(lsn)), _TOASTED_FIELDS))
        for after, lsn in ((full, 100), (partial, 200))
    ]
    batch = decode_records(numbered(events), DecoderConfig())

    assert batch.dead_letters == ()
    rows = batch.table(TABLE).rows.to_pylist()
    assert [(r["v"], r["note"], r["blob"], r["tags"], r[UNSET_COLUMN]) for r in rows] == [
        (0, "long", b"\x00big", ["a"], None),
        (1, None, None, None, ["note", "blob", "tags"]),
    ]


def test_a_placeholder_in_a_key_column_is_a_dead_letter() -> None:
    after = {"id": 1, "v": 1, "note": "x", "blob": None, "tags": None}
    fields = [field("id", "string", optional=False), *_TOASTED_FIELDS[1:]]
    body = payload("u", after={**after, "id": _MARKER})
    events = [record(value(body, fields), key({"id": _MARKER}, fields[:1]))]

    batch = decode_records(numbered(events), DecoderConfig())

    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.UNAVAILABLE_VALUE]
