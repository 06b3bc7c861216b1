"""Decoding a batch of Debezium JSON messages into one Arrow table per target table.

The work is split in two passes because per-row Arrow calls are what makes Python decoders slow:

1. :meth:`_Batch.add` parses each message (orjson), validates the envelope, routes it to its
   table and appends the row's JSON values to per-column lists (:mod:`ingest.debezium.rows`).
2. :func:`~ingest.debezium.columns.decode_table` turns each column's list into one Arrow array
   with the column's codec, once per batch (:mod:`ingest.debezium.columns`).

The common event - a schemaless create/read/update of a table with a configured schema - skips
step 1's dicts: :mod:`ingest.debezium.fastpath` decodes it with msgspec straight into a tuple of
the row's values; everything else takes the general path, in batch order.

A message that fails anywhere becomes a :class:`~ingest.debezium.model.DeadLetter` holding the
raw key and value, its topic, partition and offset, a reason and the error text.

A :class:`RecordHold` may take messages out before their rows are kept (``transactions:
consistent`` holds events of transactions it cannot publish yet); the fast path hands it the
text of the ``transaction`` blocks it met along with the rows, a run of rows at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import orjson
import pyarrow as pa

from ingest.debezium.columns import decode_table
from ingest.debezium.errors import DeadLetterReason, MessageError
from ingest.debezium.fastpath import BlockText
from ingest.debezium.model import (
    DeadLetter,
    DecodedBatch,
    DecodedTable,
    DecoderConfig,
    Origins,
    RawRecord,
    RecordChunk,
)
from ingest.debezium.position import LSN_LIMIT, BadPosition, encode_position, pack_pair
from ingest.debezium.rows import Row, TableRows
from ingest.debezium.topics import Route, route_topic
from ingest.debezium.unify import unify_schemas

#: Consecutive messages the fast path may leave to the general path before a chunk stops
#: trying it (a topic whose messages embed their schema never suits it).
_MAX_FAST_MISSES = 32


def decode_records(records: Iterable[RawRecord], config: DecoderConfig) -> DecodedBatch:
    """Decode one batch of Kafka messages (any mix of topics) into per-table Arrow tables.

    Never raises for bad input: malformed or unexpected messages come back as dead letters.
    """
    return decode_chunks(RecordChunk.split(records), config)


class RecordHold(Protocol):
    """Takes messages out of a batch before their rows are kept (``transactions: consistent``
    holds the events of transactions it cannot publish yet): each method says which messages
    are held. The decoder asks about every message but tombstones, once."""

    def fast(
        self,
        chunk: RecordChunk,
        base: int,
        origins: Sequence[int],
        blocks: Sequence[BlockText | None],
    ) -> list[int]:
        """Messages the fast path decoded, a run of them at a time: the record at ``origins[i]
        - base`` of ``chunk`` and the text of its ``transaction`` block ``blocks[i]`` (as it
        stands in the envelope, unchecked; empty when there is none). Returns the ``i`` held,
        ascending (a run at a time: one call per ~2,000 events instead of one each)."""
        ...

    def raw(self, chunk: RecordChunk, index: int, value: bytes) -> bool:
        """Any other message, before it is parsed."""
        ...


def decode_chunks(
    chunks: Iterable[RecordChunk], config: DecoderConfig, hold: RecordHold | None = None
) -> DecodedBatch:
    """:func:`decode_records` for messages already in chunks (the executors' fast path), less
    the messages ``hold`` takes. With ``config.avro``, the messages are Avro (Confluent wire
    format) and are decoded by their schema ids first (:mod:`ingest.debezium.avro`)."""
    if config.avro is not None:
        from ingest.debezium.avro import decode_avro_chunks  # confluent-kafka[avro]: imported late

        return decode_avro_chunks(chunks, config, hold)
    return decode_json_chunks(chunks, config, hold)


def decode_json_chunks(
    chunks: Iterable[RecordChunk], config: DecoderConfig, hold: RecordHold | None = None
) -> DecodedBatch:
    """:func:`decode_chunks` for messages of Kafka Connect's JSON converter (the Avro path
    hands them over transcoded)."""
    batch = _Batch(config, hold)
    for chunk in chunks:
        batch.add_chunk(chunk)
    return batch.finish()


def table_schemas(batch: DecodedBatch) -> dict[str, pa.Schema]:
    """Per table, the source schema its rows carry (unified over its segments if compatible).

    This is what a caller compares with the catalog to add new nullable columns or widen types
    before committing; a table whose segments do not unify maps to its last segment's schema.
    """
    schemas: dict[str, pa.Schema] = {}
    for decoded in batch.tables:
        known = schemas.get(decoded.table)
        unified = None if known is None else unify_schemas(known, decoded.source_schema)
        schemas[decoded.table] = unified if unified is not None else decoded.source_schema
    return schemas


#: Fast rows handed to a hold at a time (at most): a block's text lies in its message's value,
#: and read right after the value was decoded it is still in the CPU's cache. Handed over a
#: chunk (~8,000 events, ~5 MB of values) at a time, the hold read each from memory: a task's
#: decode of 41,600 benchmark events took 7-18 ms longer with the hold than without, against
#: 2-4 ms 256 at a time (bench/archive/ingest-transactions.md, run 25).
_HOLD_RUN = 256


class _Batch:
    def __init__(self, config: DecoderConfig, hold: RecordHold | None = None) -> None:
        self.config = config
        self.hold = hold
        self.routes: dict[str, Route] = {}
        self.tables: dict[str, TableRows] = {}
        self.dead_letters: list[DeadLetter] = []
        self.ignored = 0
        self.tombstones = 0
        self.origins = Origins()

    def add_chunk(self, chunk: RecordChunk) -> None:
        """Route, parse and keep the messages of one chunk; the hot path, hence one method.

        A chunk is one topic, so it is routed once; each message is then parsed and kept.
        """
        base = self.origins.add(chunk)
        route = self.routes.get(chunk.topic) or self._route(chunk.topic)
        table = route.table
        if table is None:
            self._unrouted(chunk, route)
            return
        rows = self.tables.get(table) or self._table(table)
        fast = rows.fast_rows()
        misses = 0  # in a row: a chunk whose messages never suit the fast path stops trying it
        kept: list[tuple[object, ...]] = []  # fast rows not yet handed to `rows`, in order
        seqs: list[bytes] = []
        origins: list[int] = []
        hold = self.hold
        blocks: list[BlockText | None] = []  # with a hold: each kept row's block
        for index, value in enumerate(chunk.values):
            if not value:
                self.tombstones += 1
                continue
            if fast is not None:
                hit = fast.decode(value)
                if hit is not None:
                    misses = 0
                    kept.append(hit[0])
                    seqs.append(hit[1])
                    origins.append(base + index)
                    if hold is not None:
                        blocks.append(hit[2])
                        if len(blocks) == _HOLD_RUN:  # the hold reads them while in cache
                            self._keep_fast(rows, chunk, base, (kept, seqs, origins), blocks)
                            kept, seqs, origins, blocks = [], [], [], []
                    continue
                misses += 1
                if kept:  # the general path appends too: keep the batch order
                    self._keep_fast(rows, chunk, base, (kept, seqs, origins), blocks)
                    kept, seqs, origins, blocks = [], [], [], []
            if hold is not None and hold.raw(chunk, index, value):
                continue
            trying = misses <= _MAX_FAST_MISSES
            self._general(rows, chunk, index, base, value, arm=trying)
            fast = rows.fast_rows() if trying else None
        if kept:
            self._keep_fast(rows, chunk, base, (kept, seqs, origins), blocks)

    def _keep_fast(
        self,
        rows: TableRows,
        chunk: RecordChunk,
        base: int,
        run: tuple[list[tuple[object, ...]], list[bytes], list[int]],
        blocks: list[BlockText | None],
    ) -> None:
        """Hand a run of fast rows to ``rows``, less those the hold takes (few: the events of
        transactions not published yet)."""
        kept, seqs, origins = run
        held = () if self.hold is None else self.hold.fast(chunk, base, origins, blocks)
        if held:
            out = set(held)
            keep = [i for i in range(len(kept)) if i not in out]
            if not keep:
                return
            kept = [kept[i] for i in keep]
            seqs = [seqs[i] for i in keep]
            origins = [origins[i] for i in keep]
        rows.extend_fast(kept, seqs, origins)

    def _general(
        self, rows: TableRows, chunk: RecordChunk, index: int, base: int, value: bytes, *,
        arm: bool,
    ) -> None:  # fmt: skip
        """Parse one message whole and keep its row, or make it a dead letter; with ``arm``, a
        message with an embedded schema arms the fast path for the ones that follow."""
        try:
            document = orjson.loads(value)
            schema = None
            if type(document) is dict and "payload" in document and "schema" in document:
                document, schema = document["payload"], document["schema"]
            if document is None:
                self.tombstones += 1
                return
            if type(document) is not dict:
                raise MessageError(DeadLetterReason.BAD_ENVELOPE, "the message is not an object")
            seq = _position(document, chunk, index)
            rows.add(document, schema, seq, chunk.keys[index], base + index)
            if schema is not None and arm:
                rows.arm(value, schema)
        except orjson.JSONDecodeError as exc:
            error = f"malformed JSON: {exc}"
            self._dead(chunk, index, DeadLetterReason.MALFORMED_JSON, error, rows.name)
        except MessageError as exc:
            self._dead(chunk, index, exc.reason, str(exc), rows.name)

    def _unrouted(self, chunk: RecordChunk, route: Route) -> None:
        """A chunk of a topic without a table: ignored on purpose, or every message dead."""
        for index, value in enumerate(chunk.values):
            if not value:
                self.tombstones += 1
            elif self.hold is not None and self.hold.raw(chunk, index, value):
                continue
            elif route.ignored:
                self.ignored += 1
            else:
                self._dead(chunk, index, DeadLetterReason.UNMAPPED_TOPIC, route.error or "", None)

    def _route(self, topic: str) -> Route:
        config = self.config
        route = route_topic(topic, config.topic_tables, config.namespaces, config.ignored_topics)
        self.routes[topic] = route
        return route

    def _table(self, name: str) -> TableRows:
        blocks = self.hold is not None  # only a hold reads the events' transaction blocks
        rows = self.tables[name] = TableRows(name, self.config, self.origins, blocks=blocks)
        return rows

    def _dead(
        self,
        chunk: RecordChunk,
        index: int,
        reason: DeadLetterReason,
        error: str,
        table: str | None,
    ) -> None:
        self.dead_letters.append(DeadLetter.of(chunk.record(index), reason, error, table))

    def finish(self) -> DecodedBatch:
        decoded: list[DecodedTable] = []
        for rows in self.tables.values():
            tables, dead = decode_table(rows)
            decoded.extend(tables)
            self.dead_letters.extend(dead)
        return DecodedBatch(
            tables=tuple(decoded),
            dead_letters=tuple(self.dead_letters),
            ignored=self.ignored,
            tombstones=self.tombstones,
        )


def _position(payload: Row, chunk: RecordChunk, index: int) -> bytes:
    """The encoded position, with the PostgreSQL case (by far the most common) inlined."""
    source = payload.get("source")
    if type(source) is dict:
        lsn = source.get("lsn")
        if type(lsn) is int and 0 <= lsn < LSN_LIMIT:
            return pack_pair(lsn, 0)
    try:
        return encode_position(payload, chunk.offsets[index], chunk.timestamps_ms[index])
    except BadPosition as exc:
        raise MessageError(DeadLetterReason.BAD_POSITION, str(exc)) from None
