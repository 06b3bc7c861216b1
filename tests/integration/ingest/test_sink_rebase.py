"""The sink's commit rebases onto a batch UPDATE that landed while the batch was written, with
growing back-off (fake time), and gives up with a typed CommitConflict when the policy is spent.

The commit path is driven directly (no Spark, no broker): what is under test is the driver's
rebase loop against a real catalog, and a real concurrent ``update`` commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitConflict,
    CommitOp,
    CommitRequest,
    ConflictKind,
    IdempotencyKey,
    Table,
    TableCommit,
)
from ingest.config import IngestJobConfig
from ingest.debezium import DecoderConfig
from ingest.formats import SourceFormat
from ingest.kafka.options import SourceOptions, Subscription
from ingest.sink.batch import BatchSink, SinkSettings
from tests.fixtures.commits import adds, file_names
from tests.fixtures.racing import FakeTime, RacingCatalog, racing_pair

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def catalogs(catalog_dsn: str, warehouse: Path) -> Iterator[tuple[RacingCatalog, Catalog]]:
    with racing_pair(catalog_dsn, warehouse) as pair:
        yield pair


def sink(catalog: Catalog, time: FakeTime, attempts: int) -> BatchSink:
    config = IngestJobConfig(
        job="orders-job",
        bootstrap_servers="unused:9092",
        checkpoint=Path("unused"),
        dead_letter_table="ops.dead_letters",
        source_format=SourceFormat.JSON,
        decoder=DecoderConfig(),
    )
    settings = SinkSettings(
        config=config,
        incarnation="i1",
        kafka=SourceOptions(kafka_config={}, subscription=Subscription(topics=())),
    )
    return BatchSink(catalog, settings, retry=time.policy(attempts))


def batch(table: Table) -> CommitRequest:
    """A batch's commit, planned against the table's version before the rival's updates."""
    commit = TableCommit(
        table=table.name,
        op=CommitOp.APPEND,
        partitions=(adds("", "batch"),),
        base_version=table.current_version(),
    )
    return CommitRequest(
        tables=(commit,), key=IdempotencyKey(writer_id="orders-job:i1", batch_id=0)
    )


def rival_update(table: Table):
    def update(n: int) -> None:
        table.commit(CommitOp.UPDATE, [adds("", f"rival{n}")], base_version=table.current_version())

    return update


def test_the_sink_rebases_with_back_off_then_gives_up(catalogs):
    mine, rival = catalogs
    table = mine.create_table("shop.orders", SCHEMA)
    request, time = batch(table), FakeTime()
    mine.race_with(rival_update(rival.load_table("shop.orders")))
    with pytest.raises(CommitConflict) as raised:
        sink(mine, time, attempts=3)._commit(request)
    assert raised.value.kind is ConflictKind.CONCURRENT_WRITE
    assert time.sleeps == [0.1, 0.2]
    assert "batch" not in file_names(table.plan().files)


def test_the_sink_lands_the_batch_on_the_version_that_won(catalogs):
    mine, rival = catalogs
    table = mine.create_table("shop.orders", SCHEMA)
    request, time = batch(table), FakeTime()
    update = rival_update(rival.load_table("shop.orders"))
    mine.race_with(lambda n: update(n) if n == 1 else None)
    result = sink(mine, time, attempts=3)._commit(request)
    assert time.sleeps == [0.1]
    assert result.version_of("shop.orders") == 2
    assert sorted(file_names(table.plan().files)) == ["batch", "rival1"]
