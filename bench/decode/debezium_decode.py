"""Throughput of the Debezium decoder on one core (a script, not a test).

    python -m bench.decode.debezium_decode [--events 100000] [--embedded-schema]

Generates PostgreSQL-like change events of an ``orders`` table (about 300 bytes without the
embedded schema: 8 columns with a decimal, a MicroTimestamp and a ZonedTimestamp, a trimmed
``source`` block; 85% creates/updates, 10% deletes with a key-only ``before``, 5% updates with
``before = null``) and times :func:`decode_records` over them.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import orjson

from ingest.debezium import DecoderConfig, RawRecord, decode_records
from tests.fixtures.debezium_events import decimal_bytes, decimal_field, envelope_schema, field

TOPIC = "shop.public.orders"
FIELDS = [
    field("id", "int64", optional=False),
    field("customer_id", "int32", optional=False),
    field("status", "string", logical="io.debezium.data.Enum"),
    decimal_field("amount", 10, 2),
    field("items", "int16"),
    field("created_at", "int64", logical="io.debezium.time.MicroTimestamp"),
    field("updated_at", "string", logical="io.debezium.time.ZonedTimestamp"),
    field("note", "string"),
]
KEY_SCHEMA = {"type": "struct", "fields": [FIELDS[0]], "optional": False, "name": "k"}


def generate(count: int, embedded: bool, seed: int = 7) -> list[RawRecord]:
    rng = random.Random(seed)
    schema = envelope_schema(FIELDS, "public.orders") if embedded else None
    records = []
    for offset in range(count):
        order = rng.randrange(1, 50_000)
        key = {"id": order}
        body = _body(rng, order, 30_000_000 + offset * 120)
        value = {"schema": schema, "payload": body} if embedded else body
        key_doc = {"schema": KEY_SCHEMA, "payload": key} if embedded else key
        records.append(RawRecord(TOPIC, 0, offset, orjson.dumps(key_doc), orjson.dumps(value)))
    return records


def _body(rng: random.Random, order: int, lsn: int) -> dict[str, object]:
    roll = rng.random()
    micros = 1_718_000_000_000_000 + lsn
    row = {
        "id": order, "customer_id": rng.randrange(1, 9_999),
        "status": rng.choice(["new", "paid", "shipped"]),
        "amount": decimal_bytes(rng.randrange(100, 10_000_000)), "items": rng.randrange(1, 20),
        "created_at": micros, "updated_at": "2024-06-10T06:13:20.123456Z",
        "note": rng.choice([None, "leave at door", "gift"]),
    }  # fmt: skip
    op, before, after = ("u" if roll < 0.45 else "c"), None, row
    if roll > 0.90:
        op, before, after = "d", {"id": order}, None
    source = {"connector": "postgresql", "name": "shop", "ts_ms": micros // 1000,
              "snapshot": "false", "db": "shop", "txId": lsn // 100, "lsn": lsn}  # fmt: skip
    return {"before": before, "after": after, "source": source, "op": op,
            "ts_ms": micros // 1000}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--embedded-schema", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    records = generate(args.events, args.embedded_schema)
    size = statistics.mean(len(r.value or b"") for r in records)
    config = DecoderConfig()
    if not args.embedded_schema:
        derived = decode_records(generate(10, True), DecoderConfig()).table("public.orders")
        config = DecoderConfig(schemas={"public.orders": derived.source_schema})
    # CPU time of this process: the figure for "one core", robust against other load.
    timings, parse_only = [], []
    for _ in range(args.repeat):
        start = time.process_time()
        for item in records:
            orjson.loads(item.value or b"null")
        parse_only.append(time.process_time() - start)
        start = time.process_time()
        batch = decode_records(records, config)
        timings.append(time.process_time() - start)
    assert not batch.dead_letters, batch.dead_letters[:1]
    best, parse = min(timings), min(parse_only)
    rows = batch.table("public.orders").rows.num_rows
    print(
        f"{args.events} events of {size:.0f} B (embedded schema: {args.embedded_schema}), "
        f"{rows} rows: best {best * 1000:.0f} ms CPU = {args.events / best:,.0f} events/s, "
        f"{args.events * size / best / 1e6:.0f} MB/s; orjson.loads alone "
        f"{args.events / parse:,.0f} events/s"
    )


if __name__ == "__main__":
    main()
