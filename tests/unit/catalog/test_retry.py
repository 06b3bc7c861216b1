import pytest

from catalog.retry import RetryPolicy


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_attempts_are_bounded_and_backoff_grows_with_jitter():
    t = FakeTime()
    policy = RetryPolicy(
        attempts=5,
        base_delay=0.1,
        max_delay=10,
        deadline=100,
        clock=t.clock,
        sleep=t.sleep,
        rand=lambda: 1.0,
    )
    assert list(policy.attempts_iter()) == [1, 2, 3, 4, 5]
    assert t.sleeps == [0.1, 0.2, 0.4, 0.8]


def test_jitter_stays_below_the_ceiling():
    policy = RetryPolicy(base_delay=1, max_delay=2, rand=lambda: 0.5)
    assert policy.delay(1) == 0.5 and policy.delay(10) == 1.0


def test_deadline_stops_retrying_early():
    t = FakeTime()
    policy = RetryPolicy(
        attempts=100,
        base_delay=1,
        max_delay=1,
        deadline=3.5,
        clock=t.clock,
        sleep=t.sleep,
        rand=lambda: 1.0,
    )
    assert list(policy.attempts_iter()) == [1, 2, 3, 4]


def test_loop_stops_when_the_caller_succeeds():
    t = FakeTime()
    policy = RetryPolicy(attempts=10, clock=t.clock, sleep=t.sleep)
    for attempt in policy.attempts_iter():
        if attempt == 2:
            break
    assert len(t.sleeps) == 1


def test_nonsense_policies_are_refused():
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay=2, max_delay=1)


def test_run_retries_what_it_is_told_to_and_raises_the_last_failure():
    t = FakeTime()
    policy = RetryPolicy(attempts=3, base_delay=0.1, clock=t.clock, sleep=t.sleep)
    seen: list[int] = []

    def flaky(attempt: int) -> str:
        seen.append(attempt)
        raise TimeoutError(f"attempt {attempt}")

    with pytest.raises(TimeoutError, match="attempt 3"):
        policy.run(flaky, retry_if=lambda exc: isinstance(exc, TimeoutError))
    assert seen == [1, 2, 3] and len(t.sleeps) == 2


def test_run_returns_on_success_and_raises_other_errors_at_once():
    t = FakeTime()
    policy = RetryPolicy(attempts=5, clock=t.clock, sleep=t.sleep)
    assert policy.run(lambda a: a if a == 2 else 1 / 0, retry_if=lambda e: True) == 2
    with pytest.raises(ZeroDivisionError):
        policy.run(lambda a: 1 / 0, retry_if=lambda e: isinstance(e, KeyError))
    assert len(t.sleeps) == 1
