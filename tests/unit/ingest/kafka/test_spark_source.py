"""``source.reader: spark``: the connector's jars, the options Spark's Kafka source gets, the
starting offsets it is handed, and the configurations it refuses."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ingest.config import IngestJobConfig
from ingest.errors import IngestError
from ingest.kafka.maven import pom_xml
from ingest.kafka.offsets import EARLIEST
from ingest.kafka.spark_source import (
    CONNECTOR_VERSION,
    SourceReader,
    connector_artifacts,
    spark_source_options,
    spark_starting_offsets,
)
from ingest.transactions import TransactionConfigError, TransactionMode

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _config(tmp_path: Path, **kw: Any) -> IngestJobConfig:
    return IngestJobConfig(
        **{
            "job": "j",
            "bootstrap_servers": "127.0.0.1:9092",
            "checkpoint": tmp_path / "cp",
            "dead_letter_table": "x.dead",
            "topics": ("s.public.t",),
            "source_reader": SourceReader.SPARK,
            **kw,
        }
    )


def test_the_connector_comes_with_exactly_the_dependencies_spark_lacks_each_alone() -> None:
    pom = ET.fromstring(pom_xml(connector_artifacts()))
    deps = list(pom.iterfind("m:dependencies/m:dependency", NS))

    assert [(d.findtext("m:artifactId", namespaces=NS), d.findtext("m:version", namespaces=NS))
            for d in deps] == [
        ("spark-sql-kafka-0-10_2.13", CONNECTOR_VERSION),
        ("spark-token-provider-kafka-0-10_2.13", CONNECTOR_VERSION),
        ("kafka-clients", "3.9.2"),
        ("commons-pool2", "2.13.1"),
    ]  # fmt: skip
    for dep in deps:  # Hadoop, Scala, lz4, snappy, slf4j: pyspark's own versions stay alone
        exclusion = dep.find("m:exclusions/m:exclusion", NS)
        assert exclusion is not None
        assert exclusion.findtext("m:groupId", namespaces=NS) == "*"
        assert exclusion.findtext("m:artifactId", namespaces=NS) == "*"


def test_a_connector_version_without_known_dependencies_is_refused() -> None:
    with pytest.raises(IngestError, match="no known dependency versions"):
        connector_artifacts("9.9.9")


def test_options_read_committed_fail_on_loss_and_pass_the_users_kafka_options(
    tmp_path: Path,
) -> None:
    config = _config(
        tmp_path,
        max_offsets_per_trigger=500,
        kafka_options={
            "security.protocol": "SASL_SSL",
            "isolation.level": "read_uncommitted",
            "bootstrap.servers": "elsewhere:1",
        },
    )
    options = spark_source_options(config, '{"s.public.t":{"0":5}}')

    assert options == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.isolation.level": "read_committed",  # aborted transactions never land
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "startingOffsets": '{"s.public.t":{"0":5}}',
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "subscribe": "s.public.t",
        "maxOffsetsPerTrigger": "500",
    }
    # the source's partitioning is one input partition per topic-partition (ingest.sink.records)
    assert not {"minPartitions", "maxRecordsPerPartition"} & set(options)


def test_a_pattern_subscribes_by_pattern(tmp_path: Path) -> None:
    config = _config(
        tmp_path, topics=(), topic_pattern="s\\..*", transactions=TransactionMode.EVENTUAL
    )
    options = spark_source_options(config, "latest")
    assert options["subscribePattern"] == "s\\..*" and "subscribe" not in options
    assert options["startingOffsets"] == "latest" and "maxOffsetsPerTrigger" not in options


def test_starting_offsets_name_every_partition_subscribed_now() -> None:
    stored = {"a": {"0": 10, "1": 7}, "gone": {"0": 3}}
    now = {"a": {"0": 0, "1": 0, "2": 0}, "new": {"0": 0}}

    starting = json.loads(spark_starting_offsets(stored, now))

    # a partition the job has no offset for is new since its last commit: from its earliest
    assert starting == {"a": {"0": 10, "1": 7, "2": EARLIEST}, "new": {"0": EARLIEST}}


@pytest.mark.parametrize(
    "kw",
    [
        {"transactions": TransactionMode.CONSISTENT},
        {"topics": ("s.public.t", "s.transaction")},  # auto: consistent by the subscription
    ],
)
def test_consistent_transactions_with_the_spark_reader_are_refused(
    tmp_path: Path, kw: dict[str, Any]
) -> None:
    with pytest.raises(TransactionConfigError, match=r"needs source\.reader: python"):
        _config(tmp_path, **kw)


def test_eventual_transactions_with_the_spark_reader_are_taken(tmp_path: Path) -> None:
    topics = ("s.public.t", "s.transaction")
    config = _config(tmp_path, topics=topics, transactions=TransactionMode.EVENTUAL)
    assert config.transaction_mode is TransactionMode.EVENTUAL
