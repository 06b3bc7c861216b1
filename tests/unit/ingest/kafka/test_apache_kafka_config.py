"""The local Apache Kafka's configuration: one node that is its own controller, sized for a small
machine, written so that ``java.util.Properties`` reads back what was meant."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from ingest.kafka.apache_kafka import (
    NODE_ID,
    new_cluster_id,
    render_properties,
    server_properties,
)


def _properties(**overrides: str) -> dict[str, str]:
    return server_properties(
        port=9092, controller_port=9093, log_dir=Path("/data/kafka-logs"), overrides=overrides
    )


def test_the_node_is_broker_and_its_own_single_voter_on_loopback() -> None:
    properties = _properties()

    assert properties["process.roles"] == "broker,controller"
    assert properties["controller.quorum.voters"] == f"{NODE_ID}@127.0.0.1:9093"
    assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert "CONTROLLER://127.0.0.1:9093" in properties["listeners"]
    assert properties["log.dirs"] == "/data/kafka-logs"


def test_internal_topics_fit_one_broker_and_topics_are_never_created_by_accident() -> None:
    properties = _properties()

    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert properties[key] == "1", key
    assert properties["group.initial.rebalance.delay.ms"] == "0"
    assert properties["auto.create.topics.enable"] == "false"


def test_overrides_win() -> None:
    properties = _properties(**{"auto.create.topics.enable": "true", "log.retention.ms": "1000"})

    assert properties["auto.create.topics.enable"] == "true"
    assert properties["log.retention.ms"] == "1000"


def test_rendering_escapes_backslashes_and_line_breaks() -> None:
    text = render_properties({"log.dirs": "C:\\kafka\nlogs", "a": "b"})
    assert text == "log.dirs=C:\\\\kafka\\nlogs\na=b\n"


def test_a_cluster_id_is_a_uuid_in_unpadded_url_safe_base64() -> None:
    ids = {new_cluster_id() for _ in range(200)}

    assert len(ids) == 200
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
