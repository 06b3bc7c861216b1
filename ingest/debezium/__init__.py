"""Decoding Debezium JSON change events into Arrow tables: pure Python, no Spark, Kafka or SQL.

Entry point: :func:`decode_records` takes the raw Kafka messages of a batch and a
:class:`DecoderConfig`, and returns a :class:`DecodedBatch`: per table the rows as a
``pyarrow.Table`` (data columns, ``_ls_kind``, ``_ls_seq``), its primary key and its source
schema; plus the dead letters and the counts of ignored messages and tombstones.

* Operations: ``c``/``r``/``u`` upsert ``after``; ``d`` deletes the key taken from ``before``
  (or the message key when ``before`` is null); tombstones are counted and skipped; truncates and
  unknown ops are dead letters. A primary-key change arrives as delete + create and needs nothing
  special.
* Ordering: ``_ls_seq`` encodes the source position so that byte order is source order; see
  :mod:`ingest.debezium.position` for the layouts (PostgreSQL LSN, MySQL binlog, fallback).
* Types: :mod:`ingest.debezium.layout` has the table of Debezium logical types to Arrow types.
* Schemas within a batch: :mod:`ingest.debezium.unify` (widest schema; split on incompatible
  changes).
* Topics: :mod:`ingest.debezium.topics`.
"""

from ingest.debezium.decoder import RecordHold, decode_chunks, decode_records, table_schemas
from ingest.debezium.errors import (
    DeadLetterReason,
    DebeziumError,
    DecoderConfigError,
)
from ingest.debezium.fastpath import BlockText, TransactionBlock
from ingest.debezium.layout import LOGICAL_KEY
from ingest.debezium.model import (
    DeadLetter,
    DecodedBatch,
    DecodedTable,
    DecoderConfig,
    RawRecord,
    RecordChunk,
)
from ingest.debezium.position import SEQ_COLUMN, SEQ_WIDTH, binlog_position, postgres_position

__all__ = [
    "LOGICAL_KEY",
    "SEQ_COLUMN",
    "SEQ_WIDTH",
    "BlockText",
    "DeadLetter",
    "DeadLetterReason",
    "DebeziumError",
    "DecodedBatch",
    "DecodedTable",
    "DecoderConfig",
    "DecoderConfigError",
    "RawRecord",
    "RecordChunk",
    "RecordHold",
    "TransactionBlock",
    "binlog_position",
    "decode_chunks",
    "decode_records",
    "postgres_position",
    "table_schemas",
]
