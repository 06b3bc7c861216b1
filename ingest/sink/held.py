"""Events held back from the target tables, kept in the lake: the job's hidden held table.

In ``transactions: consistent`` mode a change event whose source transaction cannot be published
yet is not kept in memory: its raw Kafka record goes into an append table of the job,
``lakestream_jobs.<job>_held``, in the same catalog commit as the batch's target files and
offsets. A restart (kill -9, lost checkpoint) therefore finds every held event in the catalog,
next to the transaction book of the same commit, and nothing is read from Kafka twice.

When held transactions publish, their records are read back as decoder-ready chunks and written
into the target tables; the held files they lived in are removed and what is still held is
rewritten into one file, in that same commit (an ``update`` of the held table).

The ``transaction`` block of each change event is read here without parsing the whole event
(:func:`event_ref`): the tasks look at every record, so this is on the hot path.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

import msgspec
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ingest.debezium import BlockText, RecordChunk, TransactionBlock
from ingest.debezium.fastpath import MSGSPEC_REFUSALS
from ingest.errors import IngestError
from ingest.sink.report import TxnRanks
from ingest.transactions import BadTransactionMetadata, normalise_id
from ingest.transactions.ranges import BITWISE_LIMIT, MAX_RANK, mask_of

HELD_NAMESPACE = "lakestream_jobs"
HELD_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("timestamp_ms", pa.int64()),
    ("txn_id", pa.string()), ("total_order", pa.int64()),
])  # fmt: skip

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_UNSAFE = re.compile(r"[^a-z0-9_]")
#: The ``transaction`` block as Debezium writes it: id first, then total_order. A PostgreSQL
#: id ``<txId>:<lsn>`` gives its ``txId`` as a group of its own (:func:`normalise_id` in the
#: pattern: a second regex per event cost as much as the first).
_BLOCK = re.compile(
    rb'"transaction"\s*:\s*(?:(null)|\{\s*"id"\s*:\s*"(?:(\d+):\d+|((?:[^"\\]|\\.)*))"\s*,\s*'
    rb'"total_order"\s*:\s*"?(\d+)"?)'
)
_ANY_BLOCK = re.compile(rb'"transaction"\s*:\s*(\{[^{}]*\})')


class _Envelope(msgspec.Struct):
    """The one field :func:`event_ref` wants of an envelope; msgspec skips the rest unbuilt."""

    transaction: TransactionBlock | msgspec.UnsetType | None = msgspec.UNSET


_ENVELOPE = msgspec.json.Decoder(_Envelope)


#: A block's text read as the fast path's struct read it before it handed over text (what
#: :meth:`HeldSplit.fast` goes by).
_BLOCK_TEXT = msgspec.json.Decoder(TransactionBlock | None)


#: The table property the compactor obeys (``compaction.policy.ENABLED``; ingest may not import
#: the compaction package). The held table carries it set to false.
COMPACTION_ENABLED = "compaction.enabled"


class HeldNameError(IngestError, ValueError):
    """The job's name cannot name a held table."""


def held_table_name(job: str) -> str:
    """``lakestream_jobs.<job>_held``; a name with characters a table name cannot hold is made
    safe and given a short hash of the original, so two such jobs never share a held table."""
    lowered = job.lower()
    safe = _UNSAFE.sub("_", lowered)
    if safe != lowered or safe != job:
        safe = f"{safe}_{hashlib.sha256(job.encode()).hexdigest()[:8]}"
    if not _IDENTIFIER.fullmatch(safe) or len(safe) > 58:
        raise HeldNameError(f"job name {job!r} cannot name a held table ({safe!r})")
    return f"{HELD_NAMESPACE}.{safe}_held"


def event_ref(value: bytes | None) -> tuple[str, int] | None:
    """The (transaction id, total_order) of a change event, None when it carries no block.

    The common event (a schemaless envelope whose block is as Debezium writes it) is read by a
    msgspec decoder that looks at the top-level ``transaction`` field only: half the time of a
    regex over the raw bytes, on every record a task reads. Anything else (an embedded schema,
    a string rank, JSON msgspec refuses) is found by :func:`_scanned_ref`.

    Raises:
        BadTransactionMetadata: the block is there but names no transaction and rank (the
            caller counts it and passes the event through as one without a block).
    """
    if value is None:
        return None
    try:
        block = _ENVELOPE.decode(value).transaction
    except MSGSPEC_REFUSALS:
        return _scanned_ref(value)
    if block is None:
        return None
    ref = None if block is msgspec.UNSET else block_ref(block)
    return ref if ref is not None else _scanned_ref(value)


def block_ref(block: TransactionBlock) -> tuple[str, int] | None:
    """(transaction id, total_order) of a decoded block as Debezium writes it (a non-empty
    string id, an integer rank); None for any other shape, which the byte scan of
    :func:`event_ref` then reads.

    Raises:
        BadTransactionMetadata: the rank is out of range.
    """
    raw, order = block.id, block.total_order
    if type(raw) is not str or not raw or type(order) is not int:
        return None
    if not 1 <= order <= MAX_RANK:
        _rank(order)  # raises, saying why
    return normalise_id(raw), order


def _scanned_ref(value: bytes) -> tuple[str, int] | None:
    """The block found in the raw bytes: the last ``"transaction":`` key of the value is the
    envelope's (row images come before it in Debezium's field order, and a key inside a string
    value would be escaped)."""
    at = value.rfind(b'"transaction"')
    if at < 0:
        return None
    match = _BLOCK.match(value, at)
    if match is None:
        return _slow_ref(value, at)
    null, tx_id, other_id, order = match.groups()
    if null is not None:
        return None
    if tx_id is not None:
        return tx_id.decode(), _rank(int(order))
    if b"\\" in other_id:  # escapes: JSON reads them
        return _slow_ref(value, at)
    try:
        raw = other_id.decode()
    except UnicodeDecodeError:
        raise BadTransactionMetadata("the transaction block's id is not UTF-8") from None
    return normalise_id(raw), _rank(int(order))


def _slow_ref(value: bytes, at: int) -> tuple[str, int] | None:
    """A block with its fields in another order, or with spaces and escapes."""
    match = _ANY_BLOCK.match(value, at)
    if match is None:
        return None  # "transaction" names something else (a column), not an object
    try:
        block = orjson.loads(match.group(1))
    except orjson.JSONDecodeError:
        raise BadTransactionMetadata("the transaction block is not JSON") from None
    raw, order = block.get("id"), block.get("total_order")
    if not isinstance(raw, str) or not raw or not str(order).isdigit():
        raise BadTransactionMetadata(f"transaction block {block!r:.80} names no id and rank")
    return normalise_id(raw), _rank(int(order))


def _rank(order: int) -> int:
    if not 1 <= order <= MAX_RANK:
        raise BadTransactionMetadata(f"transaction.total_order {order} is not in 1..{MAX_RANK}")
    return order


class HeldSplit:
    """The decoder's :class:`~ingest.debezium.RecordHold` in ``transactions: consistent``: reads
    each event's transaction and rank, and holds the events of transactions not in ``publish``.

    The decoder's fast path hands over the text of the envelope's ``transaction`` blocks, which
    :meth:`fast` reads; every other message goes through :func:`event_ref`, which is what
    decides for odd blocks too. A block that names
    no transaction and rank is counted in :attr:`malformed` and its event passes through as one
    without a block.

    A task reads one topic-partition range, where a source transaction's events come one after
    another (commit order): the loop keeps the current transaction's mask and decision and
    records one (transaction, mask) per run of it, instead of probing a dict and the publish
    set per event. An id may so be recorded more than once; the report's masks are or-ed per
    id wherever they are read."""

    def __init__(self, publish: AbstractSet[str]) -> None:
        self.publish = publish
        #: Per transaction, the ranks of its events seen (held or not), as a mask (bit n for
        #: rank n), for events the fast path did not read; ranks beyond ``BITWISE_LIMIT`` wait
        #: in lists (see :func:`~ingest.transactions.ranges.mask_of`).
        self.masks: dict[str, int] = {}
        self._wide: dict[str, list[int]] = {}
        #: :meth:`fast`'s runs, ended: a transaction id and the mask of its ranks in the run.
        self._run_ids: list[str] = []
        self._run_masks: list[int] = []
        #: :meth:`fast`'s run under way: its transaction ("": none), the ``txId`` an event's
        #: id must start with to extend it (None: only an equal id does), its mask, whether it
        #: is held.
        self._run: tuple[str, str | None, int, bool] = ("", None, 0, False)
        self.malformed = 0
        self._held: dict[int, tuple[RecordChunk, list[tuple[int, str, int]]]] = {}

    def fast(
        self,
        chunk: RecordChunk,
        base: int,
        origins: Sequence[int],
        blocks: Sequence[BlockText | None],
    ) -> list[int]:
        """Count the ranks of a run of the decoder's fast rows (``blocks[i]`` is the block's
        text of record ``origins[i] - base`` of ``chunk``); return the ``i`` of those held
        (ascending, as ``RecordHold`` says)."""
        held: list[int] = []
        picks: list[tuple[int, str, int]] | None = None
        publish = self.publish
        txn, extends, mask, holding = self._run
        # normalise_id and _take inlined, a transaction at a time: this runs for every event
        for at, text in enumerate(blocks):
            if text is None:
                continue  # the fast path handed no block over
            block = _common_block(text)
            if block is None:  # none, null, or an odd shape: read whole
                if self._odd_text(chunk, origins[at] - base, text):
                    held.append(at)
                continue
            raw, order = block
            tx_id, colon, lsn = raw.partition(":")
            if tx_id != extends or not (lsn.isdecimal() or not colon):
                if colon and tx_id.isdecimal() and lsn.isdecimal():
                    first, extends = tx_id, tx_id
                else:
                    first, extends = raw, (raw if not colon and raw.isdecimal() else None)
                if first != txn:
                    if txn:
                        self._run_ids.append(txn)
                        self._run_masks.append(mask)
                    txn, mask, holding = first, 0, first not in publish
            mask |= 1 << order
            if holding:
                if picks is None:
                    picks = self._picks(chunk)
                picks.append((origins[at] - base, txn, order))
                held.append(at)
        self._run = (txn, extends, mask, holding)
        return held

    def _odd_text(self, chunk: RecordChunk, index: int, text: BlockText) -> bool:
        """An event whose block's text is not of the common shape, read whole: whether it is
        held."""
        try:
            block = _BLOCK_TEXT.decode(text) if text else None
        except MSGSPEC_REFUSALS:
            return self._raw_at(chunk, index)
        return block is not None and self._odd(chunk, index, block)

    def _odd(self, chunk: RecordChunk, index: int, block: TransactionBlock) -> bool:
        """An event whose block the fast path's loop does not read: odd but maybe readable
        (read as :func:`event_ref` reads it), or with a rank past ``BITWISE_LIMIT``."""
        raw, order = block.id, block.total_order
        if type(raw) is not str or not raw or type(order) is not int:
            return self._raw_at(chunk, index)
        return self._take_wide(chunk, index, normalise_id(raw), order)

    def _raw_at(self, chunk: RecordChunk, index: int) -> bool:
        value = chunk.values[index]  # never None: the fast path decoded it
        return value is not None and self.raw(chunk, index, value)

    def _end_run(self) -> None:
        txn, _, mask, _ = self._run
        if txn:
            self._run_ids.append(txn)
            self._run_masks.append(mask)
        self._run = ("", None, 0, False)

    def raw(self, chunk: RecordChunk, index: int, value: bytes) -> bool:
        try:
            ref = event_ref(value)
        except BadTransactionMetadata:
            self.malformed += 1
            return False
        return ref is not None and self._take(chunk, index, *ref)

    def _take(self, chunk: RecordChunk, index: int, txn: str, order: int) -> bool:
        """Count the event's rank; hold it unless its transaction is published (:meth:`fast`
        does the same inline)."""
        if not 1 <= order <= BITWISE_LIMIT:
            return self._take_wide(chunk, index, txn, order)
        self.masks[txn] = self.masks.get(txn, 0) | 1 << order
        return txn not in self.publish and self._hold(chunk, index, txn, order)

    def _take_wide(self, chunk: RecordChunk, index: int, txn: str, order: int) -> bool:
        if not 1 <= order <= MAX_RANK:
            self.malformed += 1
            return False
        self._wide.setdefault(txn, []).append(order)
        return txn not in self.publish and self._hold(chunk, index, txn, order)

    def _hold(self, chunk: RecordChunk, index: int, txn: str, order: int) -> bool:
        self._picks(chunk).append((index, txn, order))
        return True

    def _picks(self, chunk: RecordChunk) -> list[tuple[int, str, int]]:
        """The (index, txn id, total_order) of the records of ``chunk`` held."""
        picks = self._held.get(id(chunk))
        if picks is None:
            picks = self._held[id(chunk)] = (chunk, [])
        return picks[1]

    def held(self) -> pa.Table | None:
        """The held table's rows of the events held, or None."""
        tables = [held_rows(chunk, picks) for chunk, picks in self._held.values()]
        return pa.concat_tables(tables) if tables else None

    def held_in(self, chunk: RecordChunk) -> set[int]:
        """The indices of the records of ``chunk`` held."""
        picks = self._held.get(id(chunk))
        return set() if picks is None else {i for i, _, _ in picks[1]}

    def txn_ranks(self) -> TxnRanks:
        """Per transaction the ranks seen, as a task reports them (an id maybe more than once:
        the runs of the loop, the other events, the wide ranks)."""
        self._end_run()
        ids = [*self._run_ids, *self.masks, *self._wide]
        masks = [*self._run_masks, *self.masks.values()]
        masks.extend(mask_of(orders) for orders in self._wide.values())
        return TxnRanks.of_pairs(ids, masks, malformed=self.malformed)


def _common_block(text: BlockText) -> tuple[str, int] | None:
    """(id, rank) of a block's text of the common shape (an object with a non-empty string
    id and an integer rank in 1..``BITWISE_LIMIT``); None for any other text."""
    try:
        block = _BLOCK_TEXT.decode(text) if text else None
    except MSGSPEC_REFUSALS:
        return None
    if block is None:
        return None
    raw, order = block.id, block.total_order
    if type(raw) is not str or not raw or type(order) is not int or not 0 < order <= BITWISE_LIMIT:
        return None
    return raw, order


def held_rows(chunk: RecordChunk, picks: Sequence[tuple[int, str, int]]) -> pa.Table:
    """The held table's rows for some records of a chunk: (index, txn id, total_order)."""
    index = [i for i, _, _ in picks]
    return pa.table(
        {
            "topic": pa.array([chunk.topic] * len(index), pa.string()),
            "partition": pa.array([chunk.partition] * len(index), pa.int32()),
            "offset": pa.array([chunk.offsets[i] for i in index], pa.int64()),
            "key": pa.array([chunk.keys[i] for i in index], pa.binary()),
            "value": pa.array([chunk.values[i] for i in index], pa.binary()),
            "timestamp_ms": pa.array([chunk.timestamps_ms[i] for i in index], pa.int64()),
            "txn_id": pa.array([t for _, t, _ in picks], pa.string()),
            "total_order": pa.array([o for _, _, o in picks], pa.int64()),
        },
        schema=HELD_SCHEMA,
    )


def sub_chunk(chunk: RecordChunk, keep: Sequence[int]) -> RecordChunk:
    """The records ``keep`` (indices, in order) of a chunk."""
    return RecordChunk(
        chunk.topic,
        chunk.partition,
        [chunk.offsets[i] for i in keep],
        [chunk.keys[i] for i in keep],
        [chunk.values[i] for i in keep],
        [chunk.timestamps_ms[i] for i in keep],
    )


def chunks_of(rows: pa.Table) -> list[RecordChunk]:
    """Held rows as decoder-ready chunks, per topic-partition in offset order (so a key's
    changes reach the decoder in source order)."""
    if rows.num_rows == 0:
        return []
    ordered = rows.sort_by([("topic", "ascending"), ("partition", "ascending"),
                            ("offset", "ascending")])  # fmt: skip
    chunks: list[RecordChunk] = []
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    topics = ordered.column("topic").to_pylist()
    partitions = ordered.column("partition").to_pylist()
    for i, key in enumerate(zip(topics, partitions, strict=True)):
        groups[key].append(i)
    offsets = ordered.column("offset").to_pylist()
    keys = ordered.column("key").to_pylist()
    values = ordered.column("value").to_pylist()
    stamps = ordered.column("timestamp_ms").to_pylist()
    for (topic, partition), index in groups.items():
        chunks.append(
            RecordChunk(
                topic,
                partition,
                [offsets[i] for i in index],
                [keys[i] for i in index],
                [values[i] for i in index],
                [stamps[i] for i in index],
            )
        )
    return chunks


def split_held(rows: pa.Table, publish: Iterable[str]) -> tuple[pa.Table, pa.Table]:
    """Held rows split into (those of the transactions to publish, those still held)."""
    if rows.num_rows == 0:
        return rows, rows
    chosen = pa.array(list(publish), pa.string())  # is_in hashes it: no order, repeats harmless
    mask = pc.is_in(rows.column("txn_id"), value_set=chosen)
    return rows.filter(mask), rows.filter(pc.invert(mask))
