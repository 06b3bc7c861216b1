"""The local Kafka Connect worker's configuration and the reading of connector statuses: what
the worker is told (its group, topics, REST address, plugins) and what counts as running."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.kafka.apache_kafka import KAFKA_VERSION
from ingest.kafka.connect import (
    DEBEZIUM_VERSION,
    POSTGRES_CONNECTOR_CLASS,
    ConnectError,
    ConnectorFailedError,
    connect_artifacts,
    default_plugin_path,
    deployment_connector_config,
    load_connector_json,
    postgres_connector_config,
    postgres_plugin_artifacts,
    worker_properties,
)
from ingest.kafka.connect import _states as states


def _worker(
    *, exactly_once: bool = False, overrides: dict[str, str] | None = None
) -> dict[str, str]:
    return worker_properties(
        bootstrap_servers="127.0.0.1:9092",
        rest_port=8083,
        group_id="g1",
        plugin_path=Path("/cache/plugins"),
        exactly_once=exactly_once,
        overrides=overrides,
    )


def test_the_worker_is_distributed_with_its_topics_named_after_its_group() -> None:
    properties = _worker()

    assert properties["group.id"] == "g1"
    assert [properties[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")] == [
        "g1-configs",
        "g1-offsets",
        "g1-status",
    ]
    for kind in ("config", "offset", "status"):
        assert properties[f"{kind}.storage.replication.factor"] == "1"
    assert properties["listeners"] == "http://127.0.0.1:8083"
    assert properties["rest.advertised.port"] == "8083"
    assert properties["plugin.path"] == "/cache/plugins"
    assert "exactly.once.source.support" not in properties


def test_exactly_once_and_overrides() -> None:
    properties = _worker(exactly_once=True, overrides={"offset.flush.interval.ms": "60000"})

    assert properties["exactly.once.source.support"] == "enabled"
    assert properties["offset.flush.interval.ms"] == "60000"


def test_the_worker_runs_the_brokers_kafka_version_and_the_plugin_has_its_own_directory() -> None:
    assert {a.version for a in connect_artifacts() if a.group == "org.apache.kafka"} == {
        KAFKA_VERSION
    }
    assert [a.coordinate for a in postgres_plugin_artifacts()] == [
        f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}"
    ]
    # plugin.path names the parent: the plugin's jars load in one isolated class loader
    assert default_plugin_path().name == "plugins"


@pytest.mark.parametrize("schemas", [True, False])
def test_the_connector_config_is_the_deployments_shape(schemas: bool) -> None:
    config = postgres_connector_config(
        port=5432, database="shop", tables="public.items", prefix="cx-1.a", schemas=schemas
    )

    assert config["connector.class"] == POSTGRES_CONNECTOR_CLASS
    assert config["plugin.name"] == "pgoutput"
    assert config["topic.prefix"] == "cx-1.a"
    # slot and publication names: PostgreSQL identifiers, no dots or dashes
    assert config["slot.name"] == "cx_1_a_slot"
    assert config["publication.name"] == "cx_1_a_pub"
    assert config["key.converter.schemas.enable"] == str(schemas).lower()
    assert config["value.converter.schemas.enable"] == str(schemas).lower()


def _status(connector: str, *tasks: str) -> dict[str, object]:
    return {
        "name": "c",
        "connector": {"state": connector, "worker_id": "w"},
        "tasks": [
            {"id": i, "state": s, "worker_id": "w", **({"trace": "boom"} if s == "FAILED" else {})}
            for i, s in enumerate(tasks)
        ],
    }


def test_states_list_the_connector_then_its_tasks() -> None:
    assert states({}) == []
    assert states(_status("RUNNING")) == ["RUNNING"]
    assert states(_status("RUNNING", "RUNNING", "UNASSIGNED")) == [
        "RUNNING",
        "RUNNING",
        "UNASSIGNED",
    ]


def test_a_failed_task_carries_its_trace() -> None:
    error = ConnectorFailedError("c", _status("RUNNING", "FAILED"))

    assert error.trace == "boom"
    assert error.name == "c"


# -- the deployment's connector JSON -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[4]
DOCKER_CONNECTOR = ROOT / "docker" / "connector.json"


def test_the_deployment_json_is_used_as_is_but_for_connection_and_names() -> None:
    name, deployed = load_connector_json(DOCKER_CONNECTOR)
    local = deployment_connector_config(
        DOCKER_CONNECTOR,
        host="127.0.0.1",
        port=5433,
        database="src",
        user="postgres",
        password="",
        prefix="ls-1.a",
        overrides={"schema.include.list": "public"},
    )

    assert name == "lakestream-shop"
    changed = {k for k in deployed if local[k] != deployed[k]}
    assert changed == {
        "database.hostname",
        "database.port",
        "database.dbname",
        "database.user",
        "database.password",
        "topic.prefix",
        "slot.name",
        "publication.name",
        "schema.include.list",
    }
    assert local.keys() == deployed.keys()
    assert (local["slot.name"], local["publication.name"]) == ("ls_1_a_slot", "ls_1_a_pub")
    assert local["publication.autocreate.mode"] == "disabled"  # created as source-init.sql does


def test_a_placeholder_left_in_the_deployment_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "connector.json"
    path.write_text('{"name": "c", "database.sslkey": "${file:/secrets:key}", "tasks.max": 1}')
    with pytest.raises(ConnectError, match=r"database\.sslkey"):
        deployment_connector_config(
            path, host="h", port=1, database="d", user="u", password="", prefix="p"
        )
