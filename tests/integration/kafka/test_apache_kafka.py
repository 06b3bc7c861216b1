"""The Apache Kafka launcher gives a real broker: the right high watermark after batched
produces, admin ``list_offsets``, ``CreatePartitions``, topic configs, transactions with control
records, and records that survive a restart."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from ingest.kafka.apache_kafka import ApacheKafka, ApacheKafkaError, create_topic
from tests.fixtures.broker import unique_topic
from tests.fixtures.procs import processes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 30.0


@pytest.fixture
def broker(kafka_broker: ApacheKafka) -> ApacheKafka:
    """The session's broker (tests that stop or restart one start their own)."""
    return kafka_broker


def _produce_batched(bootstrap: str, topic: str, values: list[bytes]) -> int:
    """Produce with librdkafka's batching on and return the most records one batch held, as
    the producer's statistics saw it (their batch histograms cover one interval each)."""
    largest: list[int] = [0]

    def on_stats(text: str) -> None:
        topic_stats = json.loads(text)["topics"].get(topic)
        if topic_stats is not None:
            largest[0] = max(largest[0], int(topic_stats["batchcnt"]["max"]))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,  # the default is 5 ms; 50 makes multi-record batches certain
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error)

    for value in values:
        producer.produce(topic, value, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:  # statistics rounds after the last delivery
        producer.poll(0.1)
    return largest[0]


def _consume_all(
    bootstrap: str, topic: str, *, end: int, isolation: str = "read_uncommitted"
) -> list[Message]:
    """Every record of partition 0 a consumer with ``isolation`` gets before its position
    reaches ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[Message] = []
        deadline = time.monotonic() + TIMEOUT
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"read {len(records)} records, not up to {end}"
            for message in consumer.consume(100, timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(error.str())
                if error is None:
                    records.append(message)
        return records
    finally:
        consumer.close()


def _watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("wm")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT)
        return int(low), int(high)
    finally:
        consumer.close()


def test_the_high_watermark_counts_every_record_of_multi_record_batches(
    broker: ApacheKafka,
) -> None:
    topic = unique_topic("batched")
    create_topic(broker.bootstrap_servers, topic)
    largest_batch = _produce_batched(
        broker.bootstrap_servers, topic, [b"%d" % i for i in range(1000)]
    )

    assert largest_batch > 1, "the producer sent one record per batch: nothing was tested"
    assert _watermarks(broker.bootstrap_servers, topic) == (0, 1000)
    records = _consume_all(broker.bootstrap_servers, topic, end=1000)
    assert [m.value() for m in records] == [b"%d" % i for i in range(1000)]


def test_admin_list_offsets_gives_earliest_latest_and_by_timestamp(broker: ApacheKafka) -> None:
    topic = unique_topic("offsets")
    create_topic(broker.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    base = int(time.time() * 1000) - 60_000
    for i in range(10):
        producer.produce(topic, b"v", timestamp=base + i * 1000)
    assert producer.flush(TIMEOUT) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    partition = TopicPartition(topic, 0)

    def offset(spec: OffsetSpec) -> int:
        result = admin.list_offsets({partition: spec}, request_timeout=TIMEOUT)[partition]
        return int(result.result(TIMEOUT).offset)

    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == 10
    assert offset(OffsetSpec.for_timestamp(base + 4500)) == 5
    assert offset(OffsetSpec.max_timestamp()) == 9


def test_partitions_can_be_added_to_a_topic(broker: ApacheKafka) -> None:
    topic = unique_topic("grow")
    create_topic(broker.bootstrap_servers, topic, partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})

    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(TIMEOUT)

    deadline = time.monotonic() + TIMEOUT
    while len(admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) != 3:
        assert time.monotonic() < deadline, "the new partitions never showed in the metadata"
        time.sleep(0.1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic, b"to the new partition", partition=2)
    assert producer.flush(TIMEOUT) == 0
    assert _watermarks(broker.bootstrap_servers, topic, partition=2) == (0, 1)


def test_a_compacted_topics_config_is_described(broker: ApacheKafka) -> None:
    topic = unique_topic("compacted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    new = NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new], operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)

    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_read_committed_skips_an_aborted_transaction_and_its_control_records(
    broker: ApacheKafka,
) -> None:
    topic = unique_topic("txn")
    create_topic(broker.bootstrap_servers, topic)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for value in (b"c1", b"c2", b"c3"):
        producer.produce(topic, value)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    for value in (b"a1", b"a2"):
        producer.produce(topic, value)
    producer.flush(TIMEOUT)  # the aborted records reach the log before the abort
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"c4")
    producer.commit_transaction(TIMEOUT)

    # 3 records, commit marker, 2 records, abort marker, 1 record, commit marker
    end = 9
    committed = _consume_all(broker.bootstrap_servers, topic, end=end, isolation="read_committed")
    everything = _consume_all(broker.bootstrap_servers, topic, end=end)

    assert [(m.offset(), m.value()) for m in committed] == [
        (0, b"c1"),
        (1, b"c2"),
        (2, b"c3"),
        (7, b"c4"),
    ]
    assert [m.offset() for m in everything] == [0, 1, 2, 4, 5, 7]  # 3, 6 and 8: markers
    assert _watermarks(broker.bootstrap_servers, topic) == (0, end)


@pytest.mark.slow
def test_a_broker_started_again_on_its_data_directory_keeps_topics_and_records(
    tmp_path: Path,
) -> None:
    data = tmp_path / "kafka"
    topic = unique_topic("kept")
    with ApacheKafka.start(data_dir=data) as first:
        create_topic(first.bootstrap_servers, topic, partitions=2)
        _produce_batched(first.bootstrap_servers, topic, [b"%d" % i for i in range(500)])
        port = first.port
        before = [_watermarks(first.bootstrap_servers, topic, p) for p in (0, 1)]
    assert data.is_dir(), "a given data directory must outlive the broker"

    with ApacheKafka.start(port, data_dir=data) as second:
        metadata = AdminClient({"bootstrap.servers": second.bootstrap_servers}).list_topics(
            topic, timeout=TIMEOUT
        )
        assert len(metadata.topics[topic].partitions) == 2
        after = [_watermarks(second.bootstrap_servers, topic, p) for p in (0, 1)]
        assert after == before
        assert sum(high for _, high in after) == 500


def test_a_broker_that_cannot_bind_its_port_fails_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ApacheKafkaError, match="exited") as failure:
            ApacheKafka.start(port, data_dir=tmp_path / "kafka")
    assert "Address already in use" in str(failure.value)


STARTER = """
import os, signal, sys
from pathlib import Path
from ingest.kafka.apache_kafka import ApacheKafka
broker = ApacheKafka.start(data_dir=Path(sys.argv[1]))  # nobody is left to delete a temporary one
print(broker.process.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no finally, no stop()
"""


def _alive(pid: int) -> bool:
    proc = processes().get(pid)
    return proc is not None and proc.state != "Z"  # a zombie has exited


def test_a_broker_dies_with_the_process_that_started_it_killed_with_9(tmp_path: Path) -> None:
    starter = [sys.executable, "-c", STARTER, str(tmp_path / "kafka")]
    run = subprocess.run(
        starter, check=False, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == -signal.SIGKILL, run.stderr
    pid = int(run.stdout.split()[0])
    try:
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the broker outlived the process that started it"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
