"""The streaming ingest job and the compactor service together, for many micro-batches.

What an operator relies on: the compactor never fails or stalls a streaming batch, the lake
stays equal to the source, and the number of runs a reader merges per bucket stays bounded
however long the stream runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from catalog import Catalog, CommitOp, TableNotFoundError
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from tests.fixtures.feeds import Feed, stored_offsets
from tests.integration.compaction.test_service_cli import env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
TABLE = "shop.customers"
MAX_SORTED_RUNS = 5  # the policy's default
BATCHES = 30


def stored(catalog: Catalog, config: IngestJobConfig, feed: Feed) -> dict[str, int]:
    return stored_offsets(catalog, config.job, feed.topic)


def max_runs_per_bucket(catalog: Catalog) -> int:
    try:
        plan = catalog.load_table(TABLE).plan()
    except TableNotFoundError:
        return 0
    return max((len(part.files) for part in plan.partitions), default=0)


@pytest.mark.slow
def test_the_compactor_keeps_a_streaming_cdc_table_bounded_without_failing_a_batch(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka, spark, *, tmp_path: Path
):
    feed = Feed("cdc", kafka.topic(partitions=2), keys=200)
    config = IngestJobConfig(
        job="customers-with-compactor",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=(feed.topic,),
        decoder=DecoderConfig(topic_tables={feed.topic: TABLE}),
        hash_buckets=2,
        trigger_seconds=0.2,
    )
    # its log goes to a file: a pipe nobody reads until the end fills (64 KB, some seconds of
    # INFO lines) and then blocks every thread of the compactor on its next log line
    log_path = tmp_path / "compactor.log"
    log_file = log_path.open("wb")
    compactor = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "compactor", "run", "--workers", "1"],
        cwd=ROOT,
        env={
            **env(catalog_dsn, warehouse),
            "LAKESTREAM_COMPACTOR_POLL_SECONDS": "1",
            "LAKESTREAM_LOG_LEVEL": "INFO",
        },
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    stop, runs_seen = threading.Event(), []
    try:
        with ThreadPoolExecutor(1) as pool:
            ingest = pool.submit(run_ingest, config, spark, catalog, stop)
            for chunk in range(BATCHES):  # a chunk of changes, then its micro-batch
                feed.produce(kafka, 30)
                caught_up = wait_for(
                    lambda: ingest.done() or stored(catalog, config, feed) == feed.ends, 240
                )
                assert caught_up and not ingest.done(), f"the job stopped at chunk {chunk}"
                runs_seen.append(max_runs_per_bucket(catalog))
            stop.set()
            run = ingest.result(timeout=120)  # a failed batch would raise here
    finally:
        compactor.send_signal(signal.SIGTERM)
        compactor.wait(timeout=120)
        log_file.close()
    errors = log_path.read_bytes()
    assert compactor.returncode == 0, errors.decode()[-3000:]

    table = catalog.load_table(TABLE)
    ops = [v.op for v in table.history(limit=10_000)]
    assert run.batches_committed == ops.count(CommitOp.MERGE) >= BATCHES
    assert ops.count(CommitOp.COMPACTION) >= 2, errors.decode()[-3000:]
    feed.assert_lake_holds_it(catalog, TABLE)
    assert max(runs_seen) <= 2 * MAX_SORTED_RUNS, (runs_seen, errors.decode()[-3000:])
