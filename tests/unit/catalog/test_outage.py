"""The outage guard on fake time: what it retries, how long it waits, what it logs and counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import (
    CatalogOutageError,
    CatalogUnavailableError,
    CommitStateUnknown,
    UnavailableKind,
)
from catalog.outage import OutageGuard, OutagePolicy, connection_wait
from tests.fixtures.logcapture import Lines
from tests.fixtures.racing import FakeTime

CATALOG = "postgresql://app:***@db.internal:5432/lake"


def guard(t: FakeTime, lines: Lines, budget: float = 60.0, rand: float = 1.0) -> OutageGuard:
    return OutageGuard(
        CATALOG,
        OutagePolicy(budget=budget, base_delay=0.5, max_delay=4.0),
        clock=t.clock,
        sleep=t.sleep,
        rand=lambda: rand,
        log=lines,
    )


def down(kind: UnavailableKind = UnavailableKind.CONNECTION) -> CatalogUnavailableError:
    return CatalogUnavailableError(
        "catalog connection failed: connection refused\n\tIs the server running?", kind=kind
    )


def failing(times: int, t: FakeTime, cost: float = 0.0, error=down) -> Callable[[], str]:
    """A call that fails ``times`` times (each failure taking ``cost`` seconds), then answers."""
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            t.now += cost
            raise error()
        return "answer"

    return call


def test_an_outage_is_waited_out_with_capped_back_off_and_one_line_per_retry():
    t, lines = FakeTime(), Lines()
    result = guard(t, lines).call("load_table", failing(6, t))
    assert result == "answer"
    assert t.sleeps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # doubling, capped at max_delay
    assert lines.events() == ["catalog_unavailable"] * 6 + ["catalog_available"]
    first = lines.lines[0][1]
    assert first["catalog"] == CATALOG and first["operation"] == "load_table"
    assert first["attempt"] == 1 and first["waited_s"] == 0.0 and first["kind"] == "connection"
    assert "\n" not in str(first["error"]) and "Is the server running?" in str(first["error"])
    assert [f["attempt"] for _, f in lines.lines[:6]] == [1, 2, 3, 4, 5, 6]
    assert lines.lines[5][1]["waited_s"] == 11.5  # the sleeps before the sixth failure
    assert lines.lines[-1][1]["outage_s"] == 15.5


def test_the_budget_ends_the_wait_with_an_error_naming_catalog_and_length():
    t, lines = FakeTime(), Lines()
    g = guard(t, lines, budget=20.0)
    with pytest.raises(CatalogOutageError) as raised:
        g.call("commit", failing(1000, t, cost=2.0))
    error = raised.value
    assert error.catalog == CATALOG and error.operation == "commit"
    assert 20.0 - 4.0 < error.outage_s <= 20.0 + 2.0  # no room for one more pause and try
    assert error.budget_s == 20.0 and error.attempts == len(lines.lines)
    assert isinstance(error, CatalogUnavailableError)
    assert isinstance(error.__cause__, CatalogUnavailableError)
    assert error.__cause__.kind is UnavailableKind.CONNECTION
    assert CATALOG in str(error) and "the outage budget is 20 s" in str(error)
    assert "catalog_available" not in lines.events()


def waiting_for_connections(t: FakeTime, waits: list[float]) -> Callable[[], str]:
    """A call that waits as long as it may for a pooled connection (the database is down),
    then fails as the store does: no connection."""

    def call() -> str:
        waits.append(connection_wait(10.0))  # the store's connect_timeout
        t.now += waits[-1]
        raise down(UnavailableKind.NO_CONNECTION)

    return call


def test_an_attempt_waits_for_a_connection_no_longer_than_the_budget_has_left():
    t, lines = FakeTime(), Lines()
    waits: list[float] = []
    with pytest.raises(CatalogOutageError) as raised:
        guard(t, lines, budget=4.0).call("plan", waiting_for_connections(t, waits))
    assert waits == [4.0]  # not the pool's 10 s: a budget of 4 s ends after 4
    assert raised.value.outage_s == 4.0

    t, waits = FakeTime(), []
    with pytest.raises(CatalogOutageError) as raised:
        guard(t, lines, budget=25.0).call("plan", waiting_for_connections(t, waits))
    assert waits[:2] == [10.0, 10.0] and 0 < waits[-1] < 10.0  # the last gets what is left
    assert raised.value.outage_s <= 25.0


def test_outside_a_guarded_attempt_the_connection_wait_is_the_stores_own():
    t, lines = FakeTime(), Lines()
    assert connection_wait(10.0) == 10.0
    inside = guard(t, lines, budget=60.0).call("plan", lambda: connection_wait(10.0))
    assert inside == 10.0 and connection_wait(10.0) == 10.0
    fail_fast = OutageGuard.fail_fast().call("plan", lambda: connection_wait(10.0))
    assert fail_fast == 10.0
    g = guard(t, lines, budget=1.0)
    with pytest.raises(CatalogOutageError):
        g.call("plan", failing(1000, t, cost=1.0))
    # a call after the budget was spent makes its one attempt with the store's whole wait: a
    # pool reconnecting to a database that is back needs it, or the outage would never end
    waits: list[float] = []
    with pytest.raises(CatalogOutageError):
        g.call("plan", waiting_for_connections(t, waits))
    assert waits == [10.0]


def test_one_budget_per_outage_however_many_calls_meet_it():
    t, lines = FakeTime(), Lines()
    g = guard(t, lines, budget=10.0)
    assert g.call("plan", failing(3, t, cost=1.0)) == "answer"  # outage 1 ends: 3 + 3.5 s
    assert g.call("commit", failing(3, t, cost=1.0)) == "answer"  # outage 2: a fresh budget
    assert g.stats().outages == 2

    with pytest.raises(CatalogOutageError):  # outage 3 spans two calls
        g.call("plan", failing(1000, t, cost=1.0))
    spent_at = t.now
    with pytest.raises(CatalogOutageError):  # still the same outage: one attempt, no wait
        g.call("commit", failing(1000, t, cost=1.0))
    assert t.now - spent_at <= 1.0 + 4.0


@pytest.mark.parametrize(
    "error",
    [
        lambda: down(UnavailableKind.LOCK_BUSY),
        lambda: down(UnavailableKind.STATEMENT_TIMEOUT),
        lambda: down(UnavailableKind.CONFLICT),
        lambda: CommitStateUnknown("cut at COMMIT", writer_id="w", batch_id=1),
        lambda: ValueError("a bug, not an outage"),
        lambda: CatalogOutageError(
            catalog=CATALOG, operation="x", outage_s=1, budget_s=1, attempts=1, error="e"
        ),
    ],
    ids=["lock-busy", "statement-timeout", "conflict", "unknown-outcome", "bug", "spent"],
)
def test_what_is_not_an_outage_passes_through_at_once(error):
    t, lines = FakeTime(), Lines()
    expected = type(error())
    with pytest.raises(expected):
        guard(t, lines).call("commit", failing(1, t, error=error))
    assert t.sleeps == [] and lines.lines == []


def test_a_call_may_name_further_errors_worth_retrying():
    t, lines = FakeTime(), Lines()
    unknown = lambda: CommitStateUnknown("cut at COMMIT", writer_id="w", batch_id=1)  # noqa: E731
    g = guard(t, lines)
    assert g.call("compact", failing(2, t, error=unknown), retry_also=(CommitStateUnknown,))
    assert g.stats().retries == {"commit_state_unknown": 2}


def test_a_commit_that_gave_up_on_its_own_retries_is_waited_out_too():
    t, lines = FakeTime(), Lines()
    gave_up = lambda: CatalogUnavailableError("catalog commit failed after retries")  # noqa: E731
    assert guard(t, lines).call("commit", failing(2, t, error=gave_up)) == "answer"
    assert [f["kind"] for _, f in lines.lines[:2]] == ["unavailable", "unavailable"]


def test_stats_count_retries_by_kind_and_time_since_success():
    t, lines = FakeTime(), Lines()
    g = guard(t, lines)
    assert g.stats().seconds_since_success is None
    g.call("heads", lambda: 1)
    t.now += 7.0
    kinds = iter(
        [UnavailableKind.CONNECTION, UnavailableKind.NO_CONNECTION, UnavailableKind.RESTARTING]
    )

    def flapping() -> int:
        kind = next(kinds, None)
        if kind is None:
            return 1
        before = g.stats()
        assert before.seconds_since_success is not None and before.seconds_since_success >= 7.0
        raise down(kind)

    g.call("heads", flapping)
    stats = g.stats()
    assert stats.retries == {"connection": 1, "no_connection": 1, "restarting": 1}
    assert stats.seconds_since_success == 0.0 and stats.outage_s is None


def test_fail_fast_never_waits():
    g = OutageGuard.fail_fast()
    with pytest.raises(CatalogUnavailableError):
        g.call("scan", failing(1, FakeTime()))


@given(
    failures=st.integers(min_value=0, max_value=200),
    cost=st.floats(min_value=0.0, max_value=12.0),
    budget=st.floats(min_value=0.5, max_value=400.0),
    rand=st.floats(min_value=0.0, max_value=0.999),
)
def test_the_guard_answers_iff_the_database_returned_within_the_budget(
    failures, cost, budget, rand
):
    t, lines = FakeTime(), Lines()
    g = guard(t, lines, budget=budget, rand=rand)
    try:
        answered = g.call("op", failing(failures, t, cost=cost)) == "answer"
    except CatalogOutageError as exc:
        answered = False
        # it gave up only once no further attempt could start within the budget
        assert exc.outage_s > budget - 4.0
    retries = lines.events().count("catalog_unavailable")
    assert all(pause <= 4.0 for pause in t.sleeps)
    assert t.now <= budget + cost + 1e-6  # no attempt starts after the budget
    if answered:
        assert retries == failures
        assert lines.events()[-1:] == (["catalog_available"] if failures else [])
    else:
        assert retries <= failures and "catalog_available" not in lines.events()


def test_the_committer_never_retries_longer_than_the_outage_budget():
    assert OutagePolicy(budget=300).committer_retry().deadline == 60.0
    assert OutagePolicy(budget=8).committer_retry().deadline == 8.0
    assert OutagePolicy(budget=0).committer_retry().deadline == 1.0
