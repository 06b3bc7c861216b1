"""What a real broker does under a running ingest job, and exactly once through it.

* A broker restart mid-stream: the broker process is stopped (its data on disk) while a
  streaming job reads, and started again on the same port and log directory; the job goes on
  by itself and the lake holds every event once.
* A topic gaining partitions (``AdminClient.create_partitions``) while a streaming job reads:
  records produced to the new partitions are ingested by that job, exactly once, and by the
  job started again afterwards.
* Control records at the end of a partition: a transactional producer commits and then
  aborts, so that the last offsets of the partition are a commit marker, aborted records and
  an abort marker. The job's stored offsets end at the high watermark, past them; a second
  run neither reads anything again nor waits for records that never come.

Each test checks the events in the lake (none missing, none twice), the exact stored offsets,
and that no batch was committed twice.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from catalog import Catalog
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, IngestRun, run_ingest
from ingest.kafka.apache_kafka import ApacheKafka, create_topic
from tests.fixtures.broker import produce, unique_topic
from tests.fixtures.feeds import stored_offsets
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DEAD_LETTERS = "broker.dead_letters"
TIMEOUT = 180.0


class Events:
    """JSON events with unique ids sent to one topic, and the offsets the job must store."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.ids = itertools.count(1)
        self.sent: Counter[int] = Counter()
        self.ends: dict[str, int] = {}

    def send(self, n: int, *, partition: int | None = None) -> None:
        records = []
        for _ in range(n):
            id_ = next(self.ids)
            self.sent[id_] += 1
            records.append((str(id_).encode(), orjson.dumps({"id": id_, "n": id_ * 7})))
        for sent in produce(self.bootstrap_servers, self.topic, records, partition=partition):
            part = str(sent.partition)
            self.ends[part] = max(self.ends.get(part, 0), sent.offset + 1)

    def assert_in_lake_once(self, catalog: Catalog, table: str) -> None:
        rows = catalog.load_table(table).scan().to_arrow().to_pylist()
        counts = Counter(r["id"] for r in rows)
        assert counts == self.sent, (
            f"duplicated: {sorted((counts - self.sent).elements())[:10]}, "
            f"missing: {sorted((self.sent - counts).elements())[:10]}"
        )
        assert all(r["n"] == r["id"] * 7 for r in rows)
        batches = Counter((v.writer_id, v.batch_id) for v in catalog.load_table(table).history())
        assert max(batches.values()) == 1, "a batch was committed twice"
        assert catalog.load_table(DEAD_LETTERS).scan().to_arrow().num_rows == 0


def job_config(
    bootstrap_servers: str, topic: str, table: str, home: Path, **extra: Any
) -> IngestJobConfig:
    return IngestJobConfig(
        job=f"job-{topic}",
        bootstrap_servers=bootstrap_servers,
        checkpoint=home / "checkpoint",
        dead_letter_table=DEAD_LETTERS,
        topics=(topic,),
        source_format=SourceFormat.JSON,
        json_tables={topic: table},
        starting_offsets="earliest",
        **extra,
    )


@contextmanager
def streaming(config: IngestJobConfig, spark: Any, catalog: Catalog) -> Iterator[dict[str, Any]]:
    """The job running in a thread (processing-time trigger) until the block ends."""
    stop, outcome = threading.Event(), {}

    def job() -> None:
        try:
            outcome["run"] = run_ingest(config, spark, catalog, stop)
        except BaseException as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=job)
    runner.start()
    try:
        yield outcome
    finally:
        stop.set()
        runner.join(120)
    assert "error" not in outcome, outcome.get("error")
    assert "run" in outcome


def wait_for_offsets(
    catalog: Catalog, config: IngestJobConfig, want: dict[str, int], outcome: dict[str, Any]
) -> None:
    deadline = time.monotonic() + TIMEOUT
    topic = config.topics[0]
    while (got := stored_offsets(catalog, config.job, topic)) != want:
        assert "error" not in outcome, outcome["error"]
        assert time.monotonic() < deadline, f"the job stored {got}, not {want}"
        time.sleep(0.3)


# -- a broker restart ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_broker_restarted_mid_stream_on_its_data_loses_and_duplicates_nothing(
    catalog: Catalog, spark: Any, tmp_path: Path
) -> None:
    data = tmp_path / "kafka"
    broker = ApacheKafka.start(data_dir=data)
    try:
        topic = unique_topic("restart")
        create_topic(broker.bootstrap_servers, topic, partitions=2)
        events = Events(broker.bootstrap_servers, topic)
        events.send(200)
        config = job_config(
            broker.bootstrap_servers,
            topic,
            "broker.restart",
            tmp_path,
            max_offsets_per_trigger=50,
            trigger_seconds=0.5,
        )
        with streaming(config, spark, catalog) as outcome:
            wait_for_offsets(catalog, config, events.ends, outcome)
            events.send(100)
            port = broker.port
            broker.stop()  # SIGTERM; the log directory stays
            time.sleep(3)  # the job polls a broker that is not there
            assert "error" not in outcome, outcome.get("error")
            broker = ApacheKafka.start(port, data_dir=data)
            events.send(150)
            wait_for_offsets(catalog, config, events.ends, outcome)
        assert sum(events.ends.values()) == 450
        events.assert_in_lake_once(catalog, "broker.restart")
    finally:
        broker.stop()


# -- new partitions ------------------------------------------------------------------------------


def add_partitions(bootstrap_servers: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) != total:
        assert time.monotonic() < deadline, "the new partitions never showed in the metadata"
        time.sleep(0.1)


@pytest.mark.slow
def test_partitions_added_while_a_job_runs_are_read_exactly_once(
    catalog: Catalog, kafka: Any, spark: Any, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=1)
    events = Events(kafka.bootstrap_servers, topic)
    events.send(60)
    config = job_config(
        kafka.bootstrap_servers,
        topic,
        "broker.grown",
        tmp_path,
        max_offsets_per_trigger=40,
        trigger_seconds=0.5,
    )
    with streaming(config, spark, catalog) as outcome:
        wait_for_offsets(catalog, config, {"0": 60}, outcome)
        add_partitions(kafka.bootstrap_servers, topic, 3)
        events.send(30, partition=1)
        events.send(20, partition=2)
        events.send(10, partition=0)
        wait_for_offsets(catalog, config, {"0": 70, "1": 30, "2": 20}, outcome)
    events.assert_in_lake_once(catalog, "broker.grown")

    # the job started again (to the end of the topic, then stop) reads on from the stored
    # offsets of all three partitions
    events.send(5, partition=2)
    events.send(5, partition=1)
    again = run_ingest(replace(config, trigger_seconds=None), spark, catalog)
    assert again.records_read == 10
    assert stored_offsets(catalog, config.job, topic) == {"0": 70, "1": 35, "2": 25}
    events.assert_in_lake_once(catalog, "broker.grown")


# -- control records at the end of a partition ---------------------------------------------------


def transaction(
    bootstrap_servers: str, topic: str, events: Events, n: int, *, commit: bool
) -> None:
    """``n`` events in one transaction, committed or aborted (then not counted as sent)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(n):
        id_ = next(events.ids)
        producer.produce(topic, orjson.dumps({"id": id_, "n": id_ * 7}), str(id_).encode())
        if commit:
            events.sent[id_] += 1
    producer.flush(30)  # the records reach the log before the marker
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def high_watermark(bootstrap_servers: str, topic: str) -> int:
    """Partition 0's end as a read_committed consumer sees it (its last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": unique_topic("hw")})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def test_a_job_reads_past_control_records_at_the_end_of_a_partition(
    catalog: Catalog, kafka: Any, spark: Any, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=1)
    events = Events(kafka.bootstrap_servers, topic)
    transaction(kafka.bootstrap_servers, topic, events, 5, commit=True)  # 0-4, marker 5
    wait_for(lambda: high_watermark(kafka.bootstrap_servers, topic) == 6, "the commit marker")
    transaction(kafka.bootstrap_servers, topic, events, 2, commit=False)  # 6-7, marker 8
    # the coordinator writes a transaction's markers after commit/abort returns: until the abort
    # marker is there, a read_committed consumer's end (the last stable offset) stays at 6
    wait_for(lambda: high_watermark(kafka.bootstrap_servers, topic) == 9, "the abort marker")
    config = job_config(kafka.bootstrap_servers, topic, "broker.txn", tmp_path)

    first = run_ingest(config, spark, catalog)
    assert first.records_read == 5
    assert stored_offsets(catalog, config.job, topic) == {"0": 9}
    events.assert_in_lake_once(catalog, "broker.txn")

    started = time.monotonic()
    idle: IngestRun = run_ingest(config, spark, catalog)  # nothing new: no stall, no re-read
    assert idle.records_read == 0
    assert time.monotonic() - started < 60
    assert stored_offsets(catalog, config.job, topic) == {"0": 9}

    transaction(kafka.bootstrap_servers, topic, events, 3, commit=True)  # 9-11, marker 12
    wait_for(lambda: high_watermark(kafka.bootstrap_servers, topic) == 13, "the commit marker")
    third = run_ingest(config, spark, catalog)
    assert third.records_read == 3
    assert stored_offsets(catalog, config.job, topic) == {"0": 13}
    events.assert_in_lake_once(catalog, "broker.txn")
