"""The decoder's hold (``HeldSplit``) decides as the split before decoding did
(``split_for_holding`` + decoding what it kept): the same events held, the same ranks and
malformed blocks counted, the same rows, dead letters and counts - on random batches mixing the
fast path's events, the general path's, odd and malformed blocks, tombstones, bad JSON and an
unmapped topic."""

from __future__ import annotations

import random

import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.debezium import DecodedBatch, DecoderConfig, RecordChunk, decode_chunks
from ingest.sink.held import HeldSplit, event_ref
from ingest.sink.task import split_for_holding
from ingest.transactions import BadTransactionMetadata, normalise_id
from ingest.transactions.ranges import MAX_RANK
from tests.fixtures.debezium_events import block_text, key, numbered, payload, pg_source, record

TABLE = "public.customers"
SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string())])
CONFIG = DecoderConfig(schemas={TABLE: SCHEMA}, primary_keys={TABLE: ("id",)})
TXNS = [f"{n}" for n in range(1, 9)]


def block(rng: random.Random) -> object:
    txn = rng.choice(TXNS)
    # ranks past BITWISE_LIMIT (4096) are kept apart from the masks built event by event
    order = rng.randrange(1, 6) if rng.random() < 0.9 else rng.randrange(4095, 4099)
    return rng.choices(
        [
            {"id": f"{txn}:{rng.randrange(10**6)}", "total_order": order},
            {"id": txn, "total_order": str(order), "data_collection_order": "1"},
            None,
            {"id": txn, "total_order": 0},  # malformed: passes through, counted
            {"id": "", "total_order": 1},
            {"id": txn, "total_order": MAX_RANK + 1},
        ],
        [20, 2, 3, 1, 1, 1],
    )[0]


def event(rng: random.Random, n: int) -> bytes | None:
    i = rng.randrange(30)
    op = rng.choice("cruuud")
    body = payload(op, after=None if op == "d" else {"id": i, "name": f"n{n}"},
                   before={"id": i} if op == "d" else None, source=pg_source(1000 + n))  # fmt: skip
    body["transaction"] = block(rng)
    if rng.random() < 0.05:
        del body["transaction"]
    kind = rng.choices(["ok", "tombstone", "bad json", "extra column"], [30, 1, 1, 1])[0]
    if kind == "tombstone":
        return None
    if kind == "extra column" and body["after"] is not None:
        body["after"]["extra"] = 1  # the general path: a dead letter
    value = orjson.dumps(body)
    return value[:-3] if kind == "bad json" else value


def chunks(rng: random.Random) -> list[RecordChunk]:
    records = [record(event(rng, n), key({"id": n % 30})) for n in range(400)]
    stray = [record(event(rng, n), topic="dbserver1.public.unmapped") for n in range(20)]
    return RecordChunk.split(numbered(records) + numbered(stray))


def summary(batch: DecodedBatch) -> object:
    return (
        [(t.table, t.rows.to_pylist()) for t in batch.tables],
        sorted((d.topic, d.offset, str(d.reason)) for d in batch.dead_letters),
        batch.ignored,
        batch.tombstones,
    )


def rows_of(held: pa.Table | None) -> list[dict[str, object]]:
    if held is None:
        return []
    return held.sort_by([("topic", "ascending"), ("offset", "ascending")]).to_pylist()


def ranks_read(batch: list[RecordChunk]) -> dict[str, int]:
    """Per transaction, the mask of the ranks :func:`event_ref` reads in the batch's records."""
    masks: dict[str, int] = {}
    for chunk in batch:
        for value in chunk.values:
            try:
                ref = event_ref(value)
            except BadTransactionMetadata:
                continue
            if ref is not None:
                masks[ref[0]] = masks.get(ref[0], 0) | 1 << ref[1]
    return masks


@pytest.mark.parametrize("seed", range(12))
def test_the_decoder_holds_what_the_split_before_decoding_held(seed: int) -> None:
    rng = random.Random(seed)
    batch = chunks(rng)
    publish = frozenset(rng.sample(TXNS, 4))

    kept, held_before, ranks_before = split_for_holding(batch, publish)
    before = decode_chunks(kept, CONFIG)
    split = HeldSplit(publish)
    after = decode_chunks(batch, CONFIG, split)

    assert summary(after) == summary(before)
    assert rows_of(split.held()) == rows_of(held_before)
    assert dict(split.txn_ranks().items()) == dict(ranks_before.items()) == ranks_read(batch)
    assert split.malformed == ranks_before.malformed
    assert len(before.tables) > 0 and rows_of(held_before)  # the batch exercised both sides


#: Ids whose prefixes and suffixes look alike: PostgreSQL ids of one txId with other LSNs, a
#: txId that extends another, LSNs that are not numbers, more colons, other digits, no colon.
LOOKALIKE_IDS = st.sampled_from(
    ["12:5", "12:6", "12:", "12:x", "123:5", "1:25", "12:5:6", ":5", "12", "x12:5",
     "١٢:٣", "١٢:5", "12:٣", "uuid-1:7", "uuid-1:8", "00000025:00000d08:0025"]
)  # fmt: skip


@given(st.lists(st.tuples(LOOKALIKE_IDS, st.integers(1, 70)), max_size=60), st.data())
def test_the_hold_reads_each_events_transaction_as_normalise_id_does(
    events: list[tuple[str, int]], data: st.DataObject
) -> None:
    """Whatever the order of ids (a run of one transaction, then another whose id looks like
    it), every event counts for ``normalise_id`` of its id and is held exactly when that
    transaction is not published; published transactions the task saw nothing of are not
    reported."""
    txns = sorted({normalise_id(raw) for raw, _ in events})
    unseen = ["77", "uuid-2:7"]
    publish = frozenset(data.draw(st.lists(st.sampled_from([*txns, *unseen]), unique=True)))
    chunk = RecordChunk("t", 0, list(range(len(events))), [None] * len(events),
                        [b"{}"] * len(events), [0] * len(events))  # fmt: skip
    split = HeldSplit(publish)
    blocks = [block_text(raw, order) for raw, order in events]
    # the decoder hands over runs of fast rows: cut the events into runs anywhere (a
    # transaction's run of events may go on in the next call)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=4)))
    taken: set[int] = set()
    for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
        taken.update(lo + at for at in split.fast(chunk, 0, range(lo, hi), blocks[lo:hi]))
    held = [i in taken for i in range(len(events))]

    expected: dict[str, int] = {}
    for raw, order in events:
        expected[normalise_id(raw)] = expected.get(normalise_id(raw), 0) | 1 << order
    assert dict(split.txn_ranks().items()) == expected
    assert held == [normalise_id(raw) not in publish for raw, _ in events]
    assert [row["txn_id"] for row in rows_of(split.held())] == [
        normalise_id(raw) for raw, _ in events if normalise_id(raw) not in publish
    ]
