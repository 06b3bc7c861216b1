"""The driver's view of the brokers against a real Apache Kafka: a partition that is really gone
is refused at once (the metadata agrees it is gone), not waited out as an outage."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from ingest.kafka.brokerview import BrokerView
from ingest.kafka.errors import BrokerQueryError
from ingest.kafka.offsets import PartitionId
from ingest.kafka.outage import BrokerOutagePolicy, is_unreachable

pytestmark = pytest.mark.integration


def test_offsets_of_a_deleted_topic_are_refused_not_waited_out(kafka: Any) -> None:
    topic = kafka.topic(partitions=2)
    kafka.produce(topic, [(b"k", b"v")])
    view = BrokerView({"bootstrap.servers": kafka.bootstrap_servers}, BrokerOutagePolicy(budget=0))
    try:
        assert view.latest([PartitionId(topic, 0), PartitionId(topic, 1)]) != {}
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.delete_topics([topic])[topic].result(timeout=30)
        with pytest.raises(BrokerQueryError) as caught:
            for _ in range(50):  # until the brokers' metadata has dropped it
                view.latest([PartitionId(topic, 1)])
        assert not is_unreachable(caught.value)
        assert not caught.value.transient
    finally:
        view.close()
