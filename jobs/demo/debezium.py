"""Debezium's PostgreSQL connector in Kafka Connect, configured as the Docker deployment is.

The demo and the real-Debezium tests register the connector of ``docker/connector.json`` - the
very file ``docker/register-connector.sh`` PUTs - on a local Kafka Connect worker
(:class:`~ingest.kafka.connect.LocalConnect`). Only the connection (host, port, database,
credentials) and the per-copy names (topic prefix, slot, publication) are replaced; snapshot
mode, type handling, converters, tombstones, heartbeats and topic creation are the
deployment's. As in the deployment (``docker/source-init.sql``), the publication is created
beforehand (``publication.autocreate.mode=disabled``) for every table of the captured schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from ingest.kafka.connect import deployment_connector_config, load_connector_json

#: The deployment's connector configuration (``docker/compose.yaml`` registers it).
CONNECTOR_JSON = Path(__file__).resolve().parents[2] / "docker" / "connector.json"


@dataclass(frozen=True)
class PostgresSource:
    """Where the connector reads: every table of one schema of a database on a loopback
    server (the deployment captures the schema ``shop``: ``schema.include.list``)."""

    port: int
    database: str
    schema: str = "public"
    user: str = "postgres"
    password: str = ""

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"


def connector_config(
    source: PostgresSource, prefix: str, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``docker/connector.json`` pointed at ``source``, topics ``<prefix>.<schema>.<table>``,
    slot ``<prefix>_slot`` and publication ``<prefix>_pub``; ``overrides`` last."""
    return deployment_connector_config(
        CONNECTOR_JSON,
        host="127.0.0.1",
        port=source.port,
        database=source.database,
        user=source.user,
        password=source.password,
        prefix=prefix,
        overrides={"schema.include.list": source.schema, **(overrides or {})},
    )


def topic_partitions() -> int:
    """Partitions of the topics Connect creates for the deployment's connector."""
    _, config = load_connector_json(CONNECTOR_JSON)
    return int(config.get("topic.creation.default.partitions", "1"))


def create_publication(source: PostgresSource, config: Mapping[str, str]) -> None:
    """The connector's publication, for every table of its schema, as ``source-init.sql``
    creates the deployment's (only if the config leaves creating it to us)."""
    if config.get("publication.autocreate.mode", "all_tables") != "disabled":
        return
    with psycopg.connect(source.dsn, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (config["publication.name"],)
        ).fetchone()
        if exists is None:
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                    sql.Identifier(config["publication.name"]), sql.Identifier(source.schema)
                )
            )
