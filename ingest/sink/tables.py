"""The tables an ingest job writes: which ones it knows before its first batch, and how a new
CDC table is made.

A job learns its target tables from three places before it plans a batch: the tables its
configuration names, the tables of its last commit (its stored progress), and the tables its
subscribed topics route to (with ``source.pattern`` these are known only from the broker's topic
list). Every one of them that exists is loaded before a batch is planned, so a restart writes
each batch once; a table met only in a batch (a new topic, a new source table) is created and
that batch is written again (:meth:`ingest.sink.batch.BatchSink._write`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from catalog import (
    CONCURRENT_MERGE_PROPERTY,
    DEFAULT_HASH_BUCKETS,
    SEQUENCE_COLUMN,
    SEQUENCE_COLUMN_PROPERTY,
    Catalog,
    Table,
)
from ingest.debezium import SEQ_WIDTH, DecoderConfig
from ingest.debezium.topics import route_topic
from ingest.formats import SourceFormat
from ingest.kafka.brokerview import BrokerView
from ingest.kafka.options import SourceOptions


def create_cdc_table(
    catalog: Catalog,
    name: str,
    columns: pa.Schema,
    *,
    primary_key: Sequence[str],
    hash_buckets: int = DEFAULT_HASH_BUCKETS,
    partition_by: Sequence[str] = (),
) -> Table:
    """A CDC table made as the ingest job makes one: the source ``columns`` plus the
    ``_ls_seq`` source position, which orders changes (the ``sequence-column`` property), so
    that several jobs may merge into it concurrently and a replayed change never wins over a
    later one.

    A table made with plain :meth:`Catalog.create_table` works too: the job adds ``_ls_seq`` on
    its first write, and changes are then ordered by commit order.
    """
    data = [f for f in columns if f.name != SEQUENCE_COLUMN]
    sequence = pa.field(SEQUENCE_COLUMN, pa.binary(SEQ_WIDTH), nullable=False)
    return catalog.create_table(
        name,
        pa.schema([*data, sequence], metadata=columns.metadata),
        primary_key=list(primary_key),
        hash_buckets=hash_buckets,
        partition_by=list(partition_by),
        properties={SEQUENCE_COLUMN_PROPERTY: SEQUENCE_COLUMN, CONCURRENT_MERGE_PROPERTY: "true"},
    )


def known_tables(
    catalog: Catalog,
    *,
    job: str,
    source_format: SourceFormat,
    decoder: DecoderConfig,
    json_tables: Mapping[str, str],
    kafka: SourceOptions,
) -> set[str]:
    """Every table the job may write that is known before a batch: configured ones (even if
    they do not exist yet), those of its last commit, and those of its subscribed topics."""
    configured = {*json_tables.values(), *decoder.topic_tables.values(), *decoder.schemas}
    progress = catalog.writer_progress(job)
    committed = set(catalog.table_names(progress.table_ids).values()) if progress else set()
    routed = tables_of_topics(subscribed_topics(kafka), source_format, decoder, json_tables)
    return configured | committed | routed


def subscribed_topics(kafka: SourceOptions) -> list[str]:
    """The topics the subscription matches now (the broker's topic list for a pattern)."""
    if not kafka.subscription.pattern:
        return list(kafka.subscription.topics)
    view = BrokerView(kafka.kafka_config)
    try:
        return sorted({p.topic for p in view.partitions(kafka.subscription)})
    finally:
        view.close()


def tables_of_topics(
    topics: Iterable[str],
    source_format: SourceFormat,
    decoder: DecoderConfig,
    json_tables: Mapping[str, str],
) -> set[str]:
    """The tables these topics feed (topics without a table are left out)."""
    if source_format is SourceFormat.JSON:
        return {json_tables[t] for t in topics if t in json_tables}
    routes = (
        route_topic(t, decoder.topic_tables, decoder.namespaces, decoder.ignored_topics)
        for t in topics
    )
    return {r.table for r in routes if r.table is not None}
