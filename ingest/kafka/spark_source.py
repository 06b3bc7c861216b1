"""Spark's built-in Kafka source (``source.reader: spark``): its jars, its options, its offsets.

With ``source.reader: spark`` the job reads Kafka through ``spark.readStream.format("kafka")``
(the JVM's Kafka consumer) instead of the ``lakestream-kafka`` Python source: each micro-batch
holds the records themselves, and the sink's tasks decode them (:mod:`ingest.sink.records`).

The jars: ``spark-sql-kafka-0-10`` and exactly its runtime dependencies that Spark itself does not
ship (``spark-token-provider-kafka-0-10``, ``kafka-clients``, ``commons-pool2``), fetched from
Maven Central once by :func:`ensure_connector_jars` (:mod:`ingest.kafka.maven`'s cache, so a
second run works offline) and given to the session as ``spark.jars``. Each comes alone
(non-transitive): the connector's pom also names Hadoop's client, Scala's library, lz4, snappy
and slf4j, in other versions than the ones in pyspark's ``jars/``, and two versions of a class on
one classpath is a failure waiting for its class loader.

Which version: the connector must come from the same Spark line as pyspark. On 2026-12-06 Maven
Central serves ``spark-sql-kafka-0-10_2.13`` up to 4.2.0 while PyPI's pyspark is 4.3.0 (its 4.3.0
connector is not published: ``Could not find artifact``). :data:`CONNECTOR_VERSION` is therefore
the newest published one of the 4.x line, 4.2.0, which runs on pyspark 4.3.0 (the DataSource V2
interfaces it implements did not change; the integration tests run it on the installed pyspark).
When Maven Central has the connector of pyspark's own version, raise it here together with the
dependency versions its pom declares (:data:`_RUNTIME_DEPENDENCIES`).

The offsets: Spark logs each batch's end offsets in ``<checkpoint>/offsets/<batchId>`` (its
Kafka source's JSON, ``{"topic": {"0": 123}}``, the same shape as the catalog's) before the batch
runs. Those, not ``max(offset) + 1`` of the records read, are what the batch commits: with
transactional topics the last offsets of a range are control records or aborted data, which a
``read_committed`` consumer never returns, and a restart from ``max + 1`` would read them again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.errors import IngestError
from ingest.kafka.maven import MavenArtifact, fetch_jars
from ingest.kafka.offsets import EARLIEST, OffsetsJson

if TYPE_CHECKING:
    from ingest.config import IngestJobConfig

__all__ = [
    "CONNECTOR_VERSION",
    "SPARK_KAFKA_FORMAT",
    "SourceReader",
    "connector_artifacts",
    "ensure_connector_jars",
    "spark_source_options",
    "spark_starting_offsets",
]

#: ``spark.readStream.format(...)`` of Spark's Kafka source.
SPARK_KAFKA_FORMAT = "kafka"
#: The newest ``spark-sql-kafka-0-10_2.13`` on Maven Central of pyspark's major line (see the
#: module doc: 4.3.0 is not published).
CONNECTOR_VERSION = "4.2.0"
#: Per connector version, the versions its pom declares of the dependencies Spark lacks:
#: (kafka-clients, commons-pool2).
_RUNTIME_DEPENDENCIES = {"4.2.0": ("3.9.2", "2.13.1")}


class SourceReader(StrEnum):
    """What reads Kafka in the ingest job (``source.reader``)."""

    PYTHON = "python"
    """lakestream's Python Data Source: offset ranges; the sink's tasks read them with
    confluent-kafka (librdkafka)."""
    SPARK = "spark"
    """Spark's built-in Kafka source (Java client): the batch holds the records."""


def connector_artifacts(version: str = CONNECTOR_VERSION) -> tuple[MavenArtifact, ...]:
    """The connector and the runtime dependencies Spark does not ship, each non-transitive."""
    try:
        clients, pool = _RUNTIME_DEPENDENCIES[version]
    except KeyError:
        raise IngestError(
            f"no known dependency versions for spark-sql-kafka {version} "
            f"(known: {', '.join(sorted(_RUNTIME_DEPENDENCIES))})"
        ) from None
    spark = "org.apache.spark"
    return (
        MavenArtifact(spark, "spark-sql-kafka-0-10_2.13", version, transitive=False),
        MavenArtifact(spark, "spark-token-provider-kafka-0-10_2.13", version, transitive=False),
        MavenArtifact("org.apache.kafka", "kafka-clients", clients, transitive=False),
        MavenArtifact("org.apache.commons", "commons-pool2", pool, transitive=False),
    )


def default_lib_dir(version: str = CONNECTOR_VERSION) -> Path:
    return Path.home() / ".cache" / "lakestream" / f"spark-kafka-{version}" / "lib"


def ensure_connector_jars(
    version: str = CONNECTOR_VERSION,
    lib: Path | None = None,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
) -> list[Path]:
    """The connector's jars (for ``spark.jars``), fetched with Maven unless cached.

    Raises:
        JarFetchError: no Maven, or Maven could not resolve them.
    """
    fetched = fetch_jars(
        connector_artifacts(version),
        lib or default_lib_dir(version),
        mvn=mvn,
        maven_repo=maven_repo,
        offline=offline,
    )
    return sorted(fetched.glob("*.jar"))


def spark_starting_offsets(stored: Mapping[str, Mapping[str, int]], now: OffsetsJson) -> str:
    """``startingOffsets`` JSON for Spark's source from offsets the job decided (the catalog's,
    or the configured start resolved): Spark requires every partition it subscribes to be named,
    so a partition the job has no offset for (new since its last commit) starts at its earliest
    offset - the rule of the Python reader - and one that no longer exists is left out."""
    out: OffsetsJson = {}
    for topic in sorted(now):
        parts = now[topic]
        kept = stored.get(topic, {})
        out[topic] = {p: int(kept.get(p, EARLIEST)) for p in sorted(parts, key=int)}
    return json.dumps(out, separators=(",", ":"))


def spark_source_options(config: IngestJobConfig, starting: str) -> dict[str, str]:
    """The options of ``spark.readStream.format("kafka")`` for the job.

    * ``kafka.isolation.level=read_committed`` always: Kafka Connect's exactly-once source
      writes transactional topics, and an aborted transaction's records must never land (the
      Java client defaults to ``read_uncommitted``, librdkafka to ``read_committed``);
    * ``failOnDataLoss=true``, as the Python reader: offsets the job was to read that the broker
      no longer has (retention, a recreated topic) stop the job instead of silently skipping;
    * the user's ``kafka.*`` options are passed through, except that they cannot override the
      two above nor the bootstrap servers.
    """
    options = {f"kafka.{key}": value for key, value in config.kafka_options.items()}
    options.update({
        "kafka.bootstrap.servers": config.bootstrap_servers,
        "kafka.isolation.level": "read_committed",
        "startingOffsets": starting,
        "failOnDataLoss": "true",
        "includeHeaders": "false",
    })  # fmt: skip
    return {**options, **subscription_options(config)}


def subscription_options(config: IngestJobConfig) -> dict[str, str]:
    """What the job subscribes to and how much a batch may read: the same options for either
    reader (Spark's Kafka source and ours name them alike)."""
    options = {}
    if config.topic_pattern:
        options["subscribePattern"] = config.topic_pattern
    else:
        options["subscribe"] = ",".join(config.topics)
    if config.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    return options
