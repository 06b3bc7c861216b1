"""A multi-partition transaction topic at its edges: a first batch that has no range of one of its
partitions, and a partition that was read to its end without a range since the job started.
Both published transactions out of order or held them for good before the order took every
partition of the batch's end offsets into account (issue 46)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from catalog import Catalog
from ingest.job import run_ingest
from tests.integration.transactions.support import (
    Bank,
    held_and_pending,
    new_topics,
    split_versions,
    watermark_faults,
)
from tests.integration.transactions.test_multipartition_order import ACCOUNTS, audit_ids, config

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class FirstEndOnTwo(Bank):
    """Transfer 1's END alone on partition 2; every other marker alternates over 1 and 0."""

    markers = 0

    def marker_partition(self) -> int:
        self.markers += 1
        return 2 if self.markers == 2 else (self.txid + 1) % 2


def test_first_batch_waits_for_a_partition_it_got_no_range_of(
    catalog: Catalog, kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    bank = FirstEndOnTwo(new_topics(transaction_partitions=3))
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    rng = random.Random(1)
    for _ in range(10):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    # maxOffsetsPerTrigger 20 over 55 records: batch 0 reads 3 and 4 markers of partitions 0
    # and 1 (ENDs of transfers 2-4) and none of partition 2 (transfer 1's END, already there)
    run_ingest(config(kafka, bank, tmp_path, "first", max_offsets_per_trigger=20), spark, catalog)

    assert split_versions(catalog, ACCOUNTS)[1] == []
    assert watermark_faults(catalog)[1] == []


class SplitStart(Bank):
    """Transfer 1's markers on partition 0, every later one's on partition 1."""

    def marker_partition(self) -> int:
        return 0 if self.txid == 501 else 1


def test_a_partition_read_to_its_end_by_the_first_batch_counts_as_idle(
    catalog: Catalog, kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    bank = SplitStart(new_topics(transaction_partitions=3))
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    rng = random.Random(1)
    bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    job = config(kafka, bank, tmp_path, "idle", max_offsets_per_trigger=None)
    run_ingest(job, spark, catalog)  # batch 0: only partition 0 has markers
    assert audit_ids(catalog) == [1]
    bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    run_ingest(job, spark, catalog)  # transfer 2's END on partition 1; 0 and 2 have no more

    assert audit_ids(catalog) == [1, 2]
    assert held_and_pending(catalog, "idle") == (0, 0)
