"""The msgspec fast path decides nothing: whatever it takes, the general path would have
decoded the same way, and everything else falls through to the general path in batch order."""

from __future__ import annotations

import random

import orjson
import pyarrow as pa
import pytest

from ingest.debezium import DecoderConfig, decode_records, postgres_position
from ingest.debezium import rows as rows_module
from ingest.debezium.fastpath import FastRows
from tests.fixtures.debezium_events import field, key, numbered, payload, pg_source, record, value

TABLE = "public.customers"
SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
    ]
)
CONFIG = DecoderConfig(schemas={TABLE: SCHEMA}, primary_keys={TABLE: ("id",)})


def event(op: str, i: int, lsn: int | None, **after: object) -> bytes:
    row = {"id": i, "name": f"n{i}", "score": i / 2, "tags": ["a"], **after}
    source = pg_source(lsn or 1)
    if lsn is None:
        del source["lsn"]  # position from ts_ms and the offset: the general path's job
    body = payload(op, after=None if op == "d" else row, before={"id": i} if op == "d" else None,
                   source=source)  # fmt: skip
    return orjson.dumps(body)


def batch(rng: random.Random) -> list:
    kinds = [
        lambda i, lsn: event(rng.choice("cru"), i, lsn),
        lambda i, lsn: event("d", i, lsn),
        lambda i, lsn: event("u", i, None),
        lambda i, lsn: event("u", i, lsn, extra=1),  # a column the schema lacks: dead letter
        lambda i, lsn: event("u", i, lsn, score="NaN"),  # Jackson's NaN: the codec converts
        lambda i, lsn: event("u", i, lsn, score=True),  # wrong type: dead letter by the codec
        lambda i, lsn: b"{not json",
        lambda i, lsn: None,  # tombstone
        lambda i, lsn: orjson.dumps({"schema": {}, "payload": None}),
    ]
    weights = [20, 3, 2, 1, 1, 1, 1, 1, 1]
    out = []
    for n in range(300):
        make = rng.choices(kinds, weights)[0]
        out.append(record(make(rng.randrange(40), 1000 + n), key({"id": n % 40})))
    return out


def fast_hits(patch: pytest.MonkeyPatch) -> list[int]:
    """Count the messages the fast path takes (so a test can tell it really ran)."""
    hits = [0]
    original = FastRows.decode

    def counting(self: FastRows, value: bytes) -> object:
        result = original(self, value)
        hits[0] += result is not None
        return result

    patch.setattr(FastRows, "decode", counting)
    return hits


def decoded(records: list, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    with monkeypatch.context() as patch:
        hits = fast_hits(patch)
        if not fast:
            patch.setattr(rows_module, "usable", lambda names: False)
        result = decode_records(numbered(records), CONFIG)
        assert (hits[0] > 100) is fast
    # repr: NaN scores must compare equal
    tables = [(t.table, repr(t.rows.to_pylist())) for t in result.tables]
    dead = [(d.offset, d.reason, d.error) for d in result.dead_letters]
    return tables, dead, result.tombstones


@pytest.mark.parametrize("seed", range(8))
def test_fast_and_general_paths_decode_a_mixed_batch_identically(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = batch(random.Random(seed))
    general = decoded(records, fast=False, monkeypatch=monkeypatch)
    fast = decoded(records, fast=True, monkeypatch=monkeypatch)
    assert fast == general
    assert general[0] and general[1], "the batch exercises rows and dead letters alike"


def test_the_fast_path_leaves_everything_unusual_to_the_general_path() -> None:
    fast = FastRows(("id", "name"))
    plain = {"op": "u", "after": {"id": 1, "name": "x"}, "source": {"lsn": 7, "db": "d"}}
    assert fast.decode(orjson.dumps(plain)) is not None
    for unusual in (
        {**plain, "op": "d"},
        {**plain, "after": {"id": 1, "name": "x", "new_column": 2}},
        {**plain, "after": "not an object"},
        {**plain, "source": {"lsn": -1}},
        {**plain, "source": {"file": "binlog.1", "pos": 4}},
        {"schema": {}, "payload": plain},
    ):
        assert fast.decode(orjson.dumps(unusual)) is None, unusual
    assert fast.decode(b"{truncated") is None


def test_invalid_utf8_in_a_value_is_a_dead_letter_not_a_failed_batch() -> None:
    """msgspec raises UnicodeDecodeError for it, which is no DecodeError: one such record
    failed the whole task, batch after batch, instead of going to the general path."""
    good = event("c", 1, 50)
    bad = event("c", 2, 51).replace(b'"n2"', b'"n\x802"')
    result = decode_records(numbered([record(good, key({"id": 1})), record(bad, key({"id": 2}))]),
                            CONFIG)  # fmt: skip
    assert [r["id"] for t in result.tables for r in t.rows.to_pylist()] == [1]
    assert [d.offset for d in result.dead_letters] == [1]
    assert FastRows(("id", "name")).decode(bad) is None


FIELDS_V1 = [
    field("id", "int32", optional=False),
    field("name", "string"),
    field("score", "double"),
]
FIELDS_V2 = [*FIELDS_V1, field("phone", "string")]  # a column added mid-stream


def embedded_batch(rng: random.Random) -> list:
    out = []
    fields = FIELDS_V1
    for n in range(300):
        if n == 150:
            fields = FIELDS_V2
        i = rng.randrange(40)
        row = {"id": i, "name": f"n{i}", "score": i / 3}
        if fields is FIELDS_V2:
            row["phone"] = f"555-{i}"
        choice = rng.random()
        if choice < 0.08:
            body = payload("d", before={"id": i}, source=pg_source(1000 + n))
        elif choice < 0.12:
            body = payload("u", after={**row, "score": "oops"}, source=pg_source(1000 + n))
        elif choice < 0.15:  # an older schema again: the fast path re-arms for it
            old = {k: v for k, v in row.items() if k != "phone"}
            out.append(record(value(payload("u", after=old, source=pg_source(1000 + n)),
                                    FIELDS_V1), key({"id": i}, FIELDS_V1[:1])))  # fmt: skip
            continue
        else:
            body = payload(rng.choice("cru"), after=row, source=pg_source(1000 + n))
        out.append(record(value(body, fields), key({"id": i}, fields[:1])))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_embedded_schema_messages_decode_identically_on_both_paths(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = embedded_batch(random.Random(seed))

    def run(fast: bool) -> tuple:
        with monkeypatch.context() as patch:
            hits = fast_hits(patch)
            if not fast:
                patch.setattr(rows_module, "usable", lambda names: False)
            result = decode_records(numbered(records), DecoderConfig())
            assert (hits[0] > 100) is fast
        tables = [(t.table, t.source_schema, repr(t.rows.to_pylist())) for t in result.tables]
        return tables, [(d.offset, d.reason, d.error) for d in result.dead_letters]

    general, fast = run(False), run(True)
    assert fast == general
    assert general[1], "type mismatches become dead letters on both paths"


def test_an_armed_embedded_fast_path_takes_only_its_own_schema() -> None:
    body = payload("u", after={"id": 1, "name": "x", "score": 0.5}, source=pg_source(9))
    message = value(body, FIELDS_V1)
    schema = orjson.dumps(orjson.loads(message)["schema"])
    fast = FastRows(("id", "name", "score"), schema)
    hit = fast.decode(message)
    assert hit is not None and hit[:2] == ((1, "x", 0.5), postgres_position(9))
    assert fast.decode(value(body, FIELDS_V2)) is None  # another schema: the general path
    assert fast.decode(value(body)) is None  # schemaless


def test_the_transaction_block_is_handed_over_only_to_a_reader_of_it() -> None:
    """``transactions: consistent`` reads each event's block, handed over as its text exactly
    as it stands (the hold reads it, odd ones too); ``eventual`` (no hold) has it skipped
    unread, so an odd block cannot send its events down the slow path either."""
    plain = {"op": "c", "after": {"id": 1, "name": "x"}, "source": {"lsn": 7}}
    block = b'{"id": "571:53195832", "total_order":2,"data_collection_order":1}'
    with_block = orjson.dumps(plain)[:-1] + b',"transaction":' + block + b"}"
    odd_block = orjson.dumps({**plain, "transaction": "not an object"})
    null_block = orjson.dumps({**plain, "transaction": None})
    reader, skipper = FastRows(("id", "name")), FastRows(("id", "name"), blocks=False)

    taken = reader.decode(with_block)
    assert taken is not None and taken[2] is not None
    assert bytes(taken[2]) == block
    texts = {bytes(hit[2]) for m in (odd_block, null_block, orjson.dumps(plain))
             if (hit := reader.decode(m)) is not None and hit[2] is not None}  # fmt: skip
    assert texts == {b'"not an object"', b"null", b""}  # none: the empty text

    for message in (with_block, odd_block):
        skipped = skipper.decode(message)
        assert skipped is not None and skipped[2] is None
        assert skipped[:2] == taken[:2]


def test_without_a_hold_odd_transaction_blocks_decode_as_rows() -> None:
    """Without a hold the block means nothing: the rows are those of the same events without
    one, whichever path took them."""
    plain = [orjson.loads(event("u", i, 100 + i)) for i in range(20)]
    blocks = [{**p, "transaction": "x" if i % 3 else {"id": str(i), "total_order": 1}}
              for i, p in enumerate(plain)]  # fmt: skip
    without = decode_records([record(orjson.dumps(p), key({"id": i})) for i, p in enumerate(plain)],
                             CONFIG)  # fmt: skip
    odd = decode_records([record(orjson.dumps(p), key({"id": i})) for i, p in enumerate(blocks)],
                         CONFIG)  # fmt: skip
    assert not odd.dead_letters
    assert [t.rows.to_pylist() for t in odd.tables] == [t.rows.to_pylist() for t in without.tables]
