"""Which table a Debezium topic feeds, or why its messages are not table changes.

Debezium names data topics ``<prefix>.<schema>.<table>`` (``<prefix>.<database>.<table>`` for
MySQL, ``<prefix>.<database>.<schema>.<table>`` for SQL Server). The default table is
``<namespace>.<table>`` from the last two parts, lower-cased, where the namespace is the schema
(or database) name unless :attr:`DecoderConfig.namespaces` renames it; taking the *last* two
parts keeps prefixes that themselves contain dots working. An explicit
:attr:`DecoderConfig.topic_tables` entry wins over all of this.

Topics that carry no row changes are *ignored* (counted, not dead letters): heartbeats
(``__debezium-heartbeat.*``), the schema-change topic (named just ``<prefix>``, so without a
dot), transaction metadata (``<prefix>.transaction``) and any topic the caller lists in
:attr:`DecoderConfig.ignored_topics`. A topic that fits none of this is not guessed at: its
messages become dead letters that ask for an explicit mapping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

HEARTBEAT_PREFIX = "__debezium-heartbeat"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Route:
    """Where a topic's messages go: ``table`` (``namespace.table``), or ignored, or an error."""

    table: str | None = None
    ignored: bool = False
    error: str | None = None


IGNORED = Route(ignored=True)


def route_topic(
    topic: str,
    topic_tables: Mapping[str, str],
    namespaces: Mapping[str, str],
    ignored_topics: frozenset[str],
) -> Route:
    """The route of ``topic`` under the mapping rules of the module docstring."""
    if topic in topic_tables:
        return Route(table=topic_tables[topic])
    if topic in ignored_topics or topic.startswith(HEARTBEAT_PREFIX) or "." not in topic:
        return IGNORED
    parts = topic.split(".")
    if len(parts) == 2 and parts[1] == "transaction":
        return IGNORED
    if len(parts) < 3:
        return Route(
            error=f"topic {topic!r} does not name a table; map it in tables.debezium_topic_tables"
        )
    namespace = namespaces.get(parts[-2], parts[-2])
    table = parts[-1]
    if not (_IDENTIFIER.fullmatch(namespace) and _IDENTIFIER.fullmatch(table)):
        return Route(
            error=f"topic {topic!r} gives the invalid table name {namespace}.{table}; "
            "map it in tables.debezium_topic_tables"
        )
    return Route(table=f"{namespace.lower()}.{table.lower()}")
