"""How a job treats source transactions: the ``transactions`` mode, ``on_timeout``, and what
``auto`` means for a subscription."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

from ingest.errors import IngestError
from ingest.transactions.markers import is_transaction_topic

__all__ = [
    "DEFAULT_MAX_HOLD_S",
    "DEFAULT_PARTITION_IDLE_S",
    "OnTimeout",
    "TransactionConfigError",
    "TransactionMode",
    "resolve_mode",
]

#: Seconds a transaction may block publication before ``on_timeout`` applies.
DEFAULT_MAX_HOLD_S = 300.0
#: With a transaction topic of several partitions: seconds after an END was read that a
#: partition with nothing more to read counts as past it (:mod:`ingest.transactions.order`).
DEFAULT_PARTITION_IDLE_S = 1.0


class TransactionConfigError(IngestError, ValueError):
    """Transaction settings a job cannot run with (a caller's mistake, never retried)."""


class TransactionMode(StrEnum):
    AUTO = "auto"
    """``consistent`` when the subscription includes a transaction topic, else ``eventual``."""
    CONSISTENT = "consistent"
    """Each commit publishes a prefix of the source's transactions, each one whole."""
    EVENTUAL = "eventual"
    """Each commit publishes what its batch read, cutting transactions anywhere."""


class OnTimeout(StrEnum):
    WAIT = "wait"
    """Keep holding a transaction older than ``max_hold``; warn once a minute."""
    PUBLISH = "publish"
    """Publish it as it is and name it in the commit's ``SourceWatermark.exceptions``."""


def resolve_mode(
    mode: TransactionMode,
    topics: Sequence[str],
    pattern: str | None,
    known_topics: Iterable[str] = (),
) -> TransactionMode:
    """``mode`` with ``auto`` decided by the subscription: consistent when an explicit topic is
    named ``<something>.transaction``, or when the pattern matches such a name - one of
    ``known_topics`` (the broker's topics, when the caller has them) or a likely one.

    A pattern is judged by whether it matches a transaction topic of *some* prefix: the job
    cannot list the broker's topics here, and a pattern meant for several data topics of one
    server (``dbserver1\\..*``) also matches ``dbserver1.transaction`` - that is the case to catch.
    """
    if mode is not TransactionMode.AUTO:
        return mode
    if any(is_transaction_topic(topic) for topic in topics):
        return TransactionMode.CONSISTENT
    if pattern is not None:
        compiled = re.compile(pattern)
        known = [t for t in known_topics if is_transaction_topic(t)]
        if any(compiled.fullmatch(t) for t in known) or _pattern_reaches_transactions(compiled):
            return TransactionMode.CONSISTENT
    return TransactionMode.EVENTUAL


def _pattern_reaches_transactions(compiled: re.Pattern[str]) -> bool:
    """Whether the pattern fully matches ``<p>.transaction`` for a prefix ``p`` the pattern
    itself suggests (its literal start), or for a sample prefix (``.*`` matches any)."""
    literal = re.match(r"[A-Za-z0-9_-]*", compiled.pattern)
    prefixes = {"dbserver1", literal.group(0) if literal else ""}
    return any(compiled.fullmatch(f"{p}.transaction") for p in prefixes if p)
