"""A batch UPDATE/DELETE that lands while a stream's batch is being written (real Spark, broker
and catalog): the batch commits against the version it was planned at, so the conflict matrix
sees the statement; the batch is rebased after it, which is the serial order statement -> batch.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from catalog import Catalog
from catalog.meta import SEQUENCE_COLUMN_PROPERTY
from catalog.model import SEQUENCE_COLUMN
from ingest.failpoints import FailAt, Failpoint
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, run_ingest
from tests.fixtures.logcapture import capture_events
from tests.integration.ingest.test_ingest_job import DLQ, Source, cdc_config, table_state

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _planned_and_landed(logs: list[dict], table: str) -> list[tuple[int, int]]:
    return [
        (e["tables"][table]["planned_version"], e["tables"][table]["version"])
        for e in logs
        if e["event"] == "batch_committed" and table in e["tables"]
    ]


def _stream_conflicts(logs: list[dict], job: str) -> list[tuple[str, int, str]]:
    """The stream's commits that lost to the statement: (table, expected version, winner op)."""
    return [
        (e["table"], e["expected_version"], e["winning_op"])
        for e in logs
        if e["event"] == "commit_conflict" and e["writer_id"].startswith(f"{job}:")
    ]


CUSTOMERS = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("first_name", pa.string(), nullable=False),
        pa.field("last_name", pa.string(), nullable=False),
        pa.field("email", pa.string()),
        pa.field(SEQUENCE_COLUMN, pa.binary(16), nullable=False),
    ]
)


@pytest.mark.parametrize("made_by", ["user", "job"])
def test_cdc_batch_is_rebased_after_a_statement_that_landed_mid_batch(
    catalog: Catalog, kafka, spark, tmp_path, made_by: str
):
    """``user``: a CDC table made without ``commit.concurrent-merge`` (the seed matrix: merge
    after merge fails), so the batch's first attempt loses to the statement and the sink
    rebases it. ``job``: the table the job creates (``commit.concurrent-merge``: changes are
    ordered by source position), where the matrix itself rebases merges on each other."""
    if made_by == "user":
        catalog.create_table(
            "shop.customers",
            CUSTOMERS,
            primary_key=["id"],
            hash_buckets=3,
            properties={SEQUENCE_COLUMN_PROPERTY: SEQUENCE_COLUMN},
        )
    topic = kafka.topic(partitions=1)
    source = Source()
    for i in range(1, 21):
        source.insert(i, f"c{i}@example.com")
    kafka.produce(topic, source.take())
    config = cdc_config(kafka, topic, tmp_path)
    config = IngestJobConfig(**{**config.__dict__, "max_offsets_per_trigger": None})
    run_ingest(config, spark, catalog)
    table = catalog.load_table("shop.customers")
    planned = table.current_version()

    # the next batch changes ids 1..5 at the source; the statement hits ids 1..10
    for i in range(1, 6):
        source.update(i, f"later{i}@example.com")
    source.delete(6)
    kafka.produce(topic, source.take())
    landed: list[int] = []

    def statement() -> None:
        result = table.update(where=[("id", "<=", 10)], set={"last_name": "VOID"})
        assert result.rows == 10
        assert result.version is not None
        landed.append(result.version)

    mid_batch = FailAt(Failpoint.BATCH_WRITTEN, batch=0, action=statement)
    with capture_events() as logs:
        run_ingest(IngestJobConfig(**{**config.__dict__, "fail_at": mid_batch}), spark, catalog)

    assert landed == [planned + 1]
    # the batch was planned before the statement and landed after it: the matrix saw it
    assert _planned_and_landed(logs, "shop.customers") == [(planned, planned + 2)]
    conflicts = [("shop.customers", planned, "merge")] if made_by == "user" else []
    assert _stream_conflicts(logs, "customers-cdc") == conflicts
    state = table_state(catalog, "shop.customers")
    expected = {i: dict(row) for i, row in source.rows.items()}
    for i in range(7, 11):  # untouched by the batch: the statement's change stays
        expected[i]["last_name"] = "VOID"
    # ids 1..5: the source changed them after the statement's rows (later source positions)
    assert state == expected


def test_append_batch_keeps_its_rows_after_a_delete_that_landed_mid_batch(
    catalog: Catalog, kafka, spark, tmp_path
):
    topic = kafka.topic(partitions=1)

    def events(ids: range) -> list[tuple[bytes, bytes]]:
        return [
            (str(i).encode(), orjson.dumps({"id": i, "region": ("eu", "us")[i % 2]})) for i in ids
        ]

    kafka.produce(topic, events(range(0, 20)))
    config = IngestJobConfig(
        job="clicks",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "cp",
        dead_letter_table=DLQ,
        topics=(topic,),
        source_format=SourceFormat.JSON,
        json_tables={topic: "logs.clicks"},
    )
    run_ingest(config, spark, catalog)
    table = catalog.load_table("logs.clicks")
    planned = table.current_version()
    kafka.produce(topic, events(range(20, 30)))

    def statement() -> None:
        assert table.delete(where=[("region", "=", "eu")]).rows == 10

    mid_batch = FailAt(Failpoint.BATCH_WRITTEN, batch=0, action=statement)
    with capture_events() as logs:
        run_ingest(IngestJobConfig(**{**config.__dict__, "fail_at": mid_batch}), spark, catalog)

    assert _planned_and_landed(logs, "logs.clicks") == [(planned, planned + 2)]
    assert _stream_conflicts(logs, "clicks") == [("logs.clicks", planned, "update")]
    ids = sorted(catalog.load_table("logs.clicks").scan().to_arrow().column("id").to_pylist())
    # serial order delete -> batch: the old eu rows are gone, the batch's rows all landed
    assert ids == [i for i in range(0, 20) if i % 2] + list(range(20, 30))
