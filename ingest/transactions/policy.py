"""How a job treats source transactions: the ``transactions`` mode, ``on_timeout``, and what
``auto`` means for a subscription."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum

from ingest.transactions.markers import is_transaction_topic

__all__ = ["DEFAULT_MAX_HOLD_S", "OnTimeout", "TransactionMode", "resolve_mode"]

#: Seconds a transaction may block publication before ``on_timeout`` applies.
DEFAULT_MAX_HOLD_S = 300.0


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
    mode: TransactionMode, topics: Sequence[str], pattern: str | None
) -> TransactionMode:
    """``mode`` with ``auto`` decided by the subscription: consistent when an explicit topic is
    named ``<something>.transaction``, or when the pattern can match such a name.

    A pattern is judged by whether it matches a transaction topic of *some* prefix: the job
    cannot list the broker's topics here, and a pattern meant for several data topics of one
    server (``dbserver1\\..*``) also matches ``dbserver1.transaction`` - that is the case to catch.
    """
    if mode is not TransactionMode.AUTO:
        return mode
    if any(is_transaction_topic(topic) for topic in topics):
        return TransactionMode.CONSISTENT
    if pattern is not None and _pattern_reaches_transactions(pattern):
        return TransactionMode.CONSISTENT
    return TransactionMode.EVENTUAL


def _pattern_reaches_transactions(pattern: str) -> bool:
    """Whether ``pattern`` fully matches ``<p>.transaction`` for a prefix ``p`` the pattern
    itself suggests (its literal start), or for a plain sample prefix."""
    compiled = re.compile(pattern)
    literal = re.match(r"[A-Za-z0-9_-]*", pattern)
    prefixes = {"dbserver1", literal.group(0) if literal else ""}
    return any(compiled.fullmatch(f"{p}.transaction") for p in prefixes if p)
