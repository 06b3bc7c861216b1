"""Riding out a broker outage: the driver's broker queries wait for the brokers, within a budget.

A Kafka rolling restart or a network blip makes metadata and offset queries fail for a while. The
query's planning (in Spark's long-running source process) asks the brokers at every trigger, so
one failed call used to fail the whole query with a Python and a Java stack. Each call now goes
through a :class:`BrokerGuard`: a call that fails because the brokers cannot be reached is tried
again with jittered back-off, one ``kafka_unavailable`` warning per retry (attempt, wait), until
it answers or the outage has lasted longer than the budget; then :class:`BrokerUnavailableError`
names the bootstrap servers and how long they were gone.

The loop is the catalog's (:class:`catalog.ServiceGuard`); what is Kafka's lives here: which
errors mean "unreachable" (:func:`is_unreachable`), the events and the error. As with the
catalog's guard, the budget belongs to the outage, not to the call: it starts at the first
failure after the last success. An error that is not about reaching the brokers (a bad
credential, an unknown setting) is raised at once: waiting would not mend it. Unlike the
catalog's, a budget of 0 still names the brokers: the first unreachable call fails with
:class:`BrokerUnavailableError`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from catalog import OutagePolicy, OutageRules, OutageSpent, ServiceGuard
from ingest.kafka.errors import (
    DEFAULT_BROKER_OUTAGE_BUDGET_S,
    BrokerQueryError,
    BrokerUnavailableError,
)

#: librdkafka errors that mean "the brokers could not be reached (in time)".
_UNREACHABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        # The client dropped its handle for a broker that left the cluster's metadata (a broker
        # stopped or restarted under a new address): in-flight requests fail with this while
        # the client itself stays open, so it is an outage, not a closed consumer (_DESTROY).
        KafkaError._DESTROY_BROKER,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        # what a leader election in a rolling restart answers for a while (Kafka's protocol
        # calls them retriable): a new leader behind on its high watermark (KIP-207), epochs
        # not yet agreed (KIP-320), a broker's log dir failing over, a broker's new address
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError._NODE_UPDATE,
    }
)


@dataclass(frozen=True)
class BrokerOutagePolicy:
    """How long and how patiently broker queries wait for the brokers."""

    budget: float = DEFAULT_BROKER_OUTAGE_BUDGET_S
    """Seconds an outage may last before the query fails; 0: fail at the first failed call."""
    base_delay: float = 0.5
    max_delay: float = 5.0
    call_timeout: float = 5.0
    """Seconds one metadata or offsets request may take: an outage is reported about this
    often, and the last attempt may end this long after the budget."""

    def __post_init__(self) -> None:
        if self.budget < 0:
            raise ValueError("the broker outage budget cannot be negative")
        if not 0 < self.base_delay <= self.max_delay or self.call_timeout <= 0:
            raise ValueError("broker back-off needs 0 < base_delay <= max_delay, call_timeout > 0")

    def outage(self) -> OutagePolicy:
        """The guard's policy: a pause is at least half ``base_delay``, however the jitter falls."""
        return OutagePolicy(
            budget=self.budget,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            min_delay=self.base_delay / 2,
        )


def is_unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the brokers could not be reached, rather than refused the call."""
    if isinstance(error, BrokerQueryError) and error.transient:
        return True
    if isinstance(error, BrokerQueryError) and error.__cause__ is not None:
        return is_unreachable(error.__cause__)
    if isinstance(error, BrokerQueryError):
        return error.timed_out
    if isinstance(error, KafkaException) and isinstance(error.args[0], KafkaError):
        return error.args[0].code() in _UNREACHABLE
    return False


def _unreachable_kind(error: Exception) -> str | None:
    return "unreachable" if is_unreachable(error) else None


def _brokers_gone(spent: OutageSpent) -> BrokerUnavailableError:
    return BrokerUnavailableError(
        bootstrap_servers=spent.subject,
        outage_s=spent.outage_s,
        attempts=spent.attempts,
        error=spent.error,
    )


KAFKA_OUTAGES = OutageRules(
    classify=_unreachable_kind,
    spent=_brokers_gone,
    unavailable_event="kafka_unavailable",
    available_event="kafka_available",
    subject_field="bootstrap_servers",
    logger="lakestream.ingest.kafka",
    # the query then fails with BrokerUnavailableError, which reports the last attempt
    log_last_failure=False,
)
"""The brokers' outages: :func:`is_unreachable` errors, told as ``kafka_unavailable``."""


class BrokerGuard(ServiceGuard):
    """Runs one process's broker queries, waiting out broker outages within one budget."""

    def __init__(
        self,
        bootstrap_servers: str,
        policy: BrokerOutagePolicy = BrokerOutagePolicy(),
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        super().__init__(
            bootstrap_servers, policy.outage(), KAFKA_OUTAGES, clock=clock, sleep=sleep, rand=rand
        )
        self.bootstrap_servers = bootstrap_servers
