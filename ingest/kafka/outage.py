"""Riding out a broker outage: the driver's broker queries wait for the brokers, within a budget.

A Kafka rolling restart or a network blip makes metadata and offset queries fail for a while. The
query's planning (in Spark's long-running source process) asks the brokers at every trigger, so
one failed call used to fail the whole query with a Python and a Java stack. Each call now goes
through a :class:`BrokerGuard`: a call that fails because the brokers cannot be reached is tried
again with jittered back-off, one ``kafka_unavailable`` warning per retry (attempt, wait), until
it answers or the outage has lasted longer than the budget; then :class:`BrokerUnavailableError`
names the bootstrap servers and how long they were gone.

As with the catalog's guard, the budget belongs to the outage, not to the call: it starts at the
first failure after the last success. An error that is not about reaching the brokers (a bad
credential, an unknown setting) is raised at once: waiting would not mend it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from catalog import RetryPolicy, one_line
from catalog.logs import get_logger
from ingest.kafka.errors import (
    DEFAULT_BROKER_OUTAGE_BUDGET_S,
    BrokerQueryError,
    BrokerUnavailableError,
)

T = TypeVar("T")

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


class BrokerGuard:
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
        self.bootstrap_servers = bootstrap_servers
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._outage_started: float | None = None
        self._attempts = 0

    def call(self, operation: str, fn: Callable[[], T]) -> T:
        """``fn()``, tried again while the brokers are unreachable and the budget lasts.

        Raises:
            BrokerUnavailableError: the outage outlasted the budget (the last error its cause).
            Exception: whatever ``fn`` raised that is not about reaching the brokers, at once.
        """
        while True:
            began = self._clock()
            try:
                result = fn()
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                wait = self._failed(operation, exc, began)
                if wait is None:
                    raise self._spent(exc) from exc
                self._sleep(wait)
                continue
            self._succeeded(operation)
            return result

    def _failed(self, operation: str, error: Exception, began: float) -> float | None:
        """Count one failure; the pause before the next attempt, or None once the budget is out."""
        if self._outage_started is None:
            self._outage_started = began
        self._attempts += 1
        waited = self._clock() - self._outage_started
        backoff = RetryPolicy(
            base_delay=self.policy.base_delay, max_delay=self.policy.max_delay, rand=self._rand
        )
        wait = max(backoff.delay(self._attempts), self.policy.base_delay / 2)
        if waited + wait >= self.policy.budget:  # the next attempt would start too late
            return None
        get_logger("lakestream.ingest.kafka").warning(
            "kafka_unavailable",
            bootstrap_servers=self.bootstrap_servers,
            operation=operation,
            attempt=self._attempts,
            wait_s=round(wait, 1),
            waited_s=round(waited, 1),
            budget_s=self.policy.budget,
            error=one_line(error),
        )
        return wait

    def _succeeded(self, operation: str) -> None:
        if self._outage_started is None:
            return
        get_logger("lakestream.ingest.kafka").info(
            "kafka_available",
            bootstrap_servers=self.bootstrap_servers,
            operation=operation,
            outage_s=round(self._clock() - self._outage_started, 1),
            attempts=self._attempts,
        )
        self._outage_started, self._attempts = None, 0

    def _spent(self, last: Exception) -> BrokerUnavailableError:
        started = self._outage_started if self._outage_started is not None else self._clock()
        return BrokerUnavailableError(
            bootstrap_servers=self.bootstrap_servers,
            outage_s=self._clock() - started,
            attempts=self._attempts,
            error=one_line(last),
        )
