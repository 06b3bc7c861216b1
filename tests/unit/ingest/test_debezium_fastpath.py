"""The msgspec fast path decides nothing: whatever it takes, the general path would have
decoded the same way, and everything else falls through to the general path in batch order."""

from __future__ import annotations

import random

import orjson
import pyarrow as pa
import pytest
from debezium_events import key, numbered, payload, pg_source, record

from ingest.debezium import DecoderConfig, decode_records
from ingest.debezium import rows as rows_module
from ingest.debezium.fastpath import FastRows

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


def decoded(records: list, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(rows_module, "usable", lambda names: False)
        result = decode_records(numbered(records), CONFIG)
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
