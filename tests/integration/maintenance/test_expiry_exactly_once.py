"""The ingest job's exactly-once survives aggressive expiry: a batch committed to the catalog
just before a crash is replayed by Spark after an expiry ran, and its key is still found."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest

from catalog import Catalog
from ingest.failpoints import FailAt, Failpoint
from ingest.job import run_ingest
from tests.fixtures.feeds import Feed, stored_offsets
from tests.integration.ingest.test_ingest_crash_matrix import job_config

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize("kind", ["cdc", "append"])
@pytest.mark.slow
def test_replay_after_aggressive_expiry_finds_the_last_batch_key(
    catalog: Catalog, kafka, spark, tmp_path: Path, kind: str
):
    stream = Feed(kind, kafka.topic(partitions=2))
    table = f"expiry.{kind}_events"
    config = job_config(stream, table, kafka, tmp_path / "job", "earliest")
    stream.produce(kafka, 100)  # several batches of 40 offsets
    run_ingest(config, spark, catalog)
    stream.produce(kafka, 60)
    # the first batch of this run lands in the catalog, then the job dies before Spark records it
    with pytest.raises(Exception, match="injected fault"):
        run_ingest(replace(config, fail_at=FailAt(Failpoint.BATCH_COMMITTED, 0)), spark, catalog)
    progress = catalog.writer_progress(config.job)
    assert progress is not None
    last_key = catalog.store.fetch_one(
        "SELECT writer_id, batch_id FROM commit_key WHERE commit_id = %(c)s",
        {"c": progress.commit_id},
    )
    assert last_key is not None

    for name in catalog.list_tables("expiry"):
        target = catalog.load_table(name)
        report = target.expire_versions(older_than=dt.timedelta(0), retain_last=1)
        assert report.versions_expired >= 2 and report.keys_removed >= 2
        target.vacuum(older_than=dt.timedelta(0))
    assert catalog.resolve_commit(last_key["writer_id"], last_key["batch_id"]) is not None

    version = catalog.load_table(table).current_version()
    before = stored_offsets(catalog, config.job, stream.topic)
    final = run_ingest(config, spark, catalog)  # Spark replays the batch first
    stream.assert_lake_holds_it(catalog, table)  # every message once, nothing duplicated
    assert stored_offsets(catalog, config.job, stream.topic) == stream.ends
    # the replayed batch was recognised by its key, not written again: only what lay beyond
    # the catalog's offsets was read and committed
    unread = sum(end - before.get(part, 0) for part, end in stream.ends.items())
    assert final.records_read == unread
    assert final.batches_committed >= 1
    assert catalog.load_table(table).current_version() == version + final.batches_committed
