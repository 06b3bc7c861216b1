"""The object store goes away in the middle of a write: nothing partial is ever published.

A :class:`~tests.fixtures.faultproxy.FaultProxy` sits between the catalog's S3 client and the
moto server. It cuts the connection that sends a chosen request and then refuses every
connection (retries included) until healed - a store that became unreachable mid-write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest

from catalog import Catalog, IdempotencyKey, StoreSettings
from tests.fixtures.compaction import files_on_disk, rows_at
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.postgres import FAST_RETRY
from tests.fixtures.s3 import S3Server

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
KEY = IdempotencyKey(writer_id="loader", batch_id=7)


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    front = FaultProxy(s3_server.port)
    try:
        yield front
    finally:
        front.heal()
        front.close()


@pytest.fixture
def cut_catalog(
    catalog_dsn: str, s3_server: S3Server, s3_warehouse: str, proxy: FaultProxy
) -> Iterator[Catalog]:
    """A catalog whose S3 traffic goes through the proxy (short timeouts: a test, not a WAN)."""
    options = s3_server.options(
        endpoint=f"http://127.0.0.1:{proxy.port}", connect_timeout=2, request_timeout=5
    )
    with Catalog.connect(
        catalog_dsn,
        warehouse=s3_warehouse,
        storage=options,
        retry=FAST_RETRY,
        settings=StoreSettings(pool_size=2),
    ) as catalog:
        yield catalog


@dataclass(frozen=True)
class Cut:
    marker: bytes
    """The request whose connection is cut (then the store stays unreachable)."""
    orphans: int
    """Complete files the failed batch leaves behind, named by no commit."""
    in_flight: bool
    """Whether an upload was cut with its bytes in flight (an incomplete upload: no object)."""


@pytest.mark.parametrize(
    "cut",
    [
        Cut(b".parquet?partNumber=", orphans=0, in_flight=True),  # the first file's bytes
        Cut(b"second/part-", orphans=1, in_flight=False),  # the second file never starts
    ],
    ids=["mid-upload", "between-files"],
)
def test_a_store_cut_mid_write_publishes_nothing_and_a_retry_lands_once(
    cut_catalog: Catalog, s3_server: S3Server, s3_bucket: str, proxy: FaultProxy, cut: Cut
):
    table = cut_catalog.create_table("shop.log", SCHEMA, partition_by=["region"])
    table.append(pa.table({"id": [1], "region": ["before"]}, schema=SCHEMA))
    before = rows_at(table)
    batch = pa.table({"id": [2, 3], "region": ["first", "second"]}, schema=SCHEMA)

    rule = proxy.partition_when_sent(cut.marker)
    with pytest.raises(OSError):
        table.append(batch, key=KEY)

    assert rule.fired
    proxy.heal()
    assert table.current_version() == 1 and rows_at(table) == before
    assert cut_catalog.resolve_commit(KEY.writer_id, KEY.batch_id) is None
    published = {f.path for f in table.plan().files}
    assert len(files_on_disk(table) - published) == cut.orphans, "only whole files, named by none"
    assert all(name.startswith("data/region=") for name in files_on_disk(table))
    assert bool(s3_server.pending_uploads(s3_bucket)) == cut.in_flight

    retried = table.append(batch, key=KEY)
    report = table.vacuum(older_than=dt.timedelta(0))  # what the failed attempt left
    replayed = table.append(batch, key=KEY)

    assert retried.version_of("shop.log") == 2 and replayed.replayed
    assert report.orphans == report.deleted == cut.orphans
    assert rows_at(table) == sorted([*before, (2, "first"), (3, "second")])
