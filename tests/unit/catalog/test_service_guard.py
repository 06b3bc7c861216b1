"""The one outage loop, parameterised by its rules: a made-up service on fake time.

The catalog's and the brokers' guards are this loop with their own rules (tests/unit/catalog/
test_outage.py and tests/unit/ingest/test_broker_failures.py); here the rules themselves are
shown to decide what is retried, what is logged under which names, and what is raised.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from catalog import OutagePolicy, OutageRules, OutageSpent, ServiceGuard
from tests.fixtures.logcapture import Lines
from tests.fixtures.racing import FakeTime


class Unreachable(Exception):
    pass


class Refused(Exception):
    pass


class Gone(Exception):
    def __init__(self, spent: OutageSpent) -> None:
        super().__init__(f"{spent.subject} gone for {spent.outage_s:g} s")
        self.spent = spent


def rules(*, log_last_failure: bool = True) -> OutageRules:
    return OutageRules(
        classify=lambda error: "down" if isinstance(error, Unreachable) else None,
        spent=Gone,
        unavailable_event="store_unavailable",
        available_event="store_available",
        subject_field="store",
        logger="lakestream.test",
        log_last_failure=log_last_failure,
    )


def guard(
    t: FakeTime,
    lines: Lines,
    *,
    budget: float = 30.0,
    min_delay: float = 0.0,
    log_last_failure: bool = True,
) -> ServiceGuard:
    policy = OutagePolicy(budget=budget, base_delay=1.0, max_delay=4.0, min_delay=min_delay)
    return ServiceGuard(
        "store-1",
        policy,
        rules(log_last_failure=log_last_failure),
        clock=t.clock,
        sleep=t.sleep,
        rand=lambda: 1.0,
        log=lines,
    )


def failing(t: FakeTime, times: int, cost: float = 1.0, error=Unreachable) -> Callable[[], str]:
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            t.now += cost
            raise error("no answer")
        return "answer"

    return call


def test_the_rules_name_the_events_and_the_service_of_each_line():
    t, lines = FakeTime(), Lines()
    assert guard(t, lines).call("read", failing(t, 2)) == "answer"
    assert lines.events() == ["store_unavailable", "store_unavailable", "store_available"]
    first = lines.lines[0][1]
    assert first["store"] == "store-1" and first["kind"] == "down" and first["wait_s"] == 1.0
    assert lines.lines[-1][1] == {
        "store": "store-1",
        "operation": "read",
        "outage_s": 5.0,
        "attempts": 2,
    }


def test_what_the_classifier_does_not_call_an_outage_is_raised_at_once():
    t, lines = FakeTime(), Lines()
    with pytest.raises(Refused):
        guard(t, lines).call("read", failing(t, 1, error=Refused))
    assert t.sleeps == [] and lines.lines == []


def test_a_spent_budget_raises_the_rules_error_with_the_outage_figures():
    t, lines = FakeTime(), Lines()
    with pytest.raises(Gone) as raised:
        guard(t, lines, budget=10.0).call("read", failing(t, 100, cost=2.0))
    spent = raised.value.spent
    assert (spent.subject, spent.operation, spent.budget_s) == ("store-1", "read", 10.0)
    assert isinstance(raised.value.__cause__, Unreachable) and spent.error == "no answer"
    # failed at 2, 5, 9 s; a fourth attempt would start at 13 s, after the budget
    assert t.sleeps == [1.0, 2.0] and spent.outage_s == 9.0 and spent.attempts == 3
    retries = lines.lines
    assert [f.get("wait_s") for _, f in retries] == [1.0, 2.0, None]  # the last one: no pause


def test_rules_may_keep_the_log_to_retries_only():
    t, lines = FakeTime(), Lines()
    with pytest.raises(Gone) as raised:
        guard(t, lines, budget=10.0, log_last_failure=False).call("read", failing(t, 100, 2.0))
    assert raised.value.spent.attempts == 3
    assert [f["wait_s"] for _, f in lines.lines] == [1.0, 2.0]


def test_a_zero_budget_fails_at_the_first_outage_with_the_rules_error():
    t, lines = FakeTime(), Lines()
    with pytest.raises(Gone):
        guard(t, lines, budget=0.0).call("read", failing(t, 1))
    assert t.sleeps == []


def test_min_delay_floors_the_jittered_pause():
    t = FakeTime()
    policy = OutagePolicy(budget=30.0, base_delay=1.0, max_delay=4.0, min_delay=0.5)
    g = ServiceGuard("store-1", policy, rules(), clock=t.clock, sleep=t.sleep, rand=lambda: 0.0)
    assert g.call("read", failing(t, 3, cost=0.0)) == "answer"
    assert t.sleeps == [0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match="min_delay"):
        OutagePolicy(base_delay=1.0, max_delay=4.0, min_delay=5.0)


def test_the_back_off_restarts_with_each_call_but_the_budget_is_the_outages():
    t, lines = FakeTime(), Lines()
    g = guard(t, lines, budget=12.0)
    with pytest.raises(Gone):
        g.call("read", failing(t, 100, cost=2.0))  # spent at 9 s, the outage goes on
    assert g.stats().outage_s == 9.0
    with pytest.raises(Gone) as raised:
        g.call("write", failing(t, 100, cost=2.0))
    # the new call pauses from base_delay again (1 s at 11 s, within the budget); at 14 s the
    # outage, not the call, is past the budget
    assert t.sleeps == [1.0, 2.0, 1.0] and raised.value.spent.attempts == 5
    assert raised.value.spent.outage_s == 14.0
    assert g.call("read", lambda: "back") == "back"
    stats = g.stats()
    assert stats.outages == 1 and stats.outage_s is None and stats.retries == {"down": 5}
