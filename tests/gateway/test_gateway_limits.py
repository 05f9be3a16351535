"""Gateway limits: token bucket, period budget and retry backoff, on
hand-computed numbers plus property checks."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.gateway import PeriodBudget, RetryPolicy, TokenBucket, backoff_cap_s, retry_delay_s

# ------------------------------------------------------------------ token bucket


def test_token_bucket_retry_after_hand_cases():
    """Rate 1/s, burst 5: a full bucket gives 5 at once, then each refusal
    says exactly how long until the asked amount has refilled."""
    b = TokenBucket(rate_per_s=1.0, burst=5.0)
    assert b.try_take(0.0, 5) == 0.0
    assert b.try_take(0.0, 1) == 1.0
    assert b.try_take(0.5, 1) == 0.5
    assert b.try_take(2.0, 3) == 1.0        # 2 tokens there, 1 more second for the third
    assert b.available(2.0) == 2.0          # refusals took nothing
    assert b.try_take(3.0, 3) == 0.0
    assert b.available(3.0) == 0.0


def test_token_bucket_refill_caps_at_burst():
    """However long the bucket sits idle, it holds at most ``burst`` tokens."""
    b = TokenBucket(rate_per_s=2.0, burst=5.0, initial=0.0)
    assert b.available(1.0) == 2.0
    assert b.available(1000.0) == 5.0
    assert b.try_take(1000.0, 5) == 0.0
    assert b.try_take(1000.0, 1) == 0.5


def test_token_bucket_amount_over_burst_is_never_possible():
    """An amount larger than the burst can never be taken: retry-after is inf,
    even on a full bucket, and nothing is deducted."""
    b = TokenBucket(rate_per_s=1.0, burst=5.0)
    assert b.try_take(0.0, 5.5) == math.inf
    assert b.available(0.0) == 5.0
    frozen = TokenBucket(rate_per_s=0.0, burst=5.0, initial=1.0)
    assert frozen.try_take(0.0, 2) == math.inf   # never refills


def test_token_bucket_refund_is_capped_at_burst():
    """Refunded tokens go back in, but never above the burst."""
    b = TokenBucket(rate_per_s=1.0, burst=5.0)
    assert b.try_take(0.0, 4) == 0.0
    b.refund(3)
    assert b.available(0.0) == 4.0
    b.refund(10)
    assert b.available(0.0) == 5.0
    assert b.try_take(0.0, 5) == 0.0
    b.refund(1, now_s=2.0)                    # refilled to 2 first, then +1
    assert b.available(2.0) == 3.0


def test_token_bucket_per_minute_helper():
    """per_minute(600) refills 10 tokens/s with a burst of 600."""
    b = TokenBucket.per_minute(600)
    assert (b.rate_per_s, b.burst) == (10.0, 600.0)
    assert b.try_take(0.0, 600) == 0.0
    assert b.try_take(0.0, 100) == 10.0
    assert TokenBucket.per_minute(60, burst=5).burst == 5.0


def test_token_bucket_time_must_not_go_backwards():
    """Asking about an earlier time than the last one is a programming error."""
    b = TokenBucket(rate_per_s=1.0, burst=5.0)
    b.try_take(3.0, 1)
    with pytest.raises(AssertionError):
        b.try_take(2.0, 1)


def test_token_bucket_rejects_bad_arguments():
    """Negative rates, non-positive bursts, out-of-range fills and negative takes are errors."""
    with pytest.raises(ValueError):
        TokenBucket(-1.0, 5.0)
    with pytest.raises(ValueError):
        TokenBucket(1.0, 0.0)
    with pytest.raises(ValueError):
        TokenBucket(1.0, 5.0, initial=6.0)
    with pytest.raises(ValueError):
        TokenBucket(1.0, 5.0).try_take(0.0, -1)


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(0.01, 100.0), burst=st.floats(0.5, 50.0),
       ops=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 10.0)),
                    min_size=1, max_size=150))
def test_token_bucket_never_exceeds_burst_plus_rate_times_time(rate, burst, ops):
    """Over any interval [s, t] the tokens taken are at most burst + rate * (t - s)
    (and so over [0, T] at most burst + rate * T)."""
    b = TokenBucket(rate, burst)
    now = 0.0
    taken: list[tuple[float, float]] = []
    for dt, amount in ops:
        now += dt
        if b.try_take(now, amount) == 0.0:
            taken.append((now, amount))
    times = [t for t, _ in taken]
    cum = np.concatenate([[0.0], np.cumsum([a for _, a in taken])])
    for i in range(len(taken)):
        for j in range(i, len(taken)):
            total = cum[j + 1] - cum[i]
            bound = burst + rate * (times[j] - times[i])
            assert total <= bound * (1 + 1e-6) + 1e-9


@settings(max_examples=300, deadline=None)
@given(rate=st.floats(1e-3, 1e3), burst=st.floats(1e-2, 1e3), start=st.floats(0.0, 1e5),
       fill=st.floats(0.0, 1.0), frac=st.floats(0.0, 1.0), poll=st.booleans())
def test_token_bucket_retry_after_is_exactly_enough(rate, burst, start, fill, frac, poll):
    """Coming back exactly retry-after seconds later succeeds despite float
    rounding, also when the caller polled once in between."""
    b = TokenBucket(rate, burst, initial=fill * burst, now_s=start)
    amount = frac * burst
    wait = b.try_take(start, amount)
    if wait == 0.0:
        return
    assert 0 < wait < math.inf
    if poll:
        start += wait / 2
        wait = b.try_take(start, amount)
        if wait == 0.0:          # rounding let the poll through: nothing left to check
            return
    assert b.try_take(start + wait, amount) == 0.0


# ------------------------------------------------------------------ period budget


def test_budget_windows_and_retry_after_to_next_window():
    """Limit 10 per 60 s: windows [0, 60), [60, 120)...; a refusal waits until
    the next window opens, and the count starts afresh exactly at 60."""
    b = PeriodBudget(limit=10.0, period_s=60.0)
    assert b.try_spend(0.0, 6) == 0.0
    assert b.try_spend(30.0, 4) == 0.0          # exactly the limit is allowed
    assert b.try_spend(30.0, 1) == 30.0
    assert b.try_spend(59.5, 1) == 0.5
    assert b.spent(59.5) == 10.0
    assert b.remaining(59.5) == 0.0
    assert b.try_spend(60.0, 1) == 0.0
    assert b.spent(60.0) == 1.0
    assert b.window_index(119.999) == 1
    assert b.spent(120.0) == 0.0
    assert b.try_spend(200.0, 10) == 0.0
    assert b.try_spend(200.0, 0.5) == 40.0


def test_budget_amount_over_limit_is_never_possible():
    """A single spend larger than the limit would fail in every window: inf."""
    b = PeriodBudget(limit=10.0, period_s=60.0)
    assert b.try_spend(0.0, 10.5) == math.inf
    assert b.spent(0.0) == 0.0


def test_budget_charge_may_overshoot_then_the_window_refuses():
    """charge() records the actual cost without checking; once over the limit
    every further try in that window is refused until the next one."""
    b = PeriodBudget(limit=10.0, period_s=100.0)
    assert b.try_spend(0.0, 8) == 0.0
    b.charge(50.0, 5)
    assert b.spent(50.0) == 13.0
    assert b.remaining(50.0) == 0.0
    assert b.try_spend(60.0, 0.5) == 40.0
    assert b.try_spend(60.0, 0.0) == 40.0
    assert b.try_spend(100.0, 10) == 0.0        # fresh window
    b.charge(150.0, -4)                          # over-reservation handed back
    assert b.spent(150.0) == 6.0
    b.charge(150.0, -100)
    assert b.spent(150.0) == 0.0


def test_budget_float_sums_at_the_limit_are_allowed():
    """0.1 + 0.2 against a limit of 0.3 is within the limit despite float rounding."""
    b = PeriodBudget(limit=0.3, period_s=1.0)
    assert b.try_spend(0.0, 0.1) == 0.0
    assert b.try_spend(0.0, 0.2) == 0.0
    assert b.try_spend(0.0, 0.01) > 0


@settings(max_examples=300, deadline=None)
@given(period=st.floats(1e-3, 1e5), now=st.floats(0.0, 1e7))
def test_budget_retry_after_lands_in_the_next_window(period, now):
    """now + retry-after is in the next window (float rounding included), where
    the spend then succeeds."""
    b = PeriodBudget(limit=1.0, period_s=period)
    b.charge(now, 1.0)
    wait = b.try_spend(now, 0.5)
    assert 0 < wait <= period * (1 + 1e-9) + 1e-9 * now
    k = b.window_index(now)
    assert b.window_index(now + wait) == k + 1
    assert b.try_spend(now + wait, 0.5) == 0.0


# ------------------------------------------------------------------ retries


def test_retry_without_jitter_doubles_up_to_the_cap():
    """jitter none: base 1, multiplier 2, max 6 -> 1, 2, 4, 6, 6 seconds."""
    policy = RetryPolicy(max_attempts=10, base=1.0, multiplier=2.0, max_delay=6.0, jitter="none")
    rng = np.random.default_rng(0)
    assert [retry_delay_s(policy, a, 0.0, rng) for a in range(1, 6)] == [1.0, 2.0, 4.0, 6.0, 6.0]


def test_retry_gives_up_after_max_attempts():
    """max_attempts counts the first try: 3 allows two retries, 1 allows none."""
    rng = np.random.default_rng(0)
    policy = RetryPolicy(max_attempts=3, jitter="none")
    assert retry_delay_s(policy, 1, 0.0, rng) == 1.0
    assert retry_delay_s(policy, 2, 0.0, rng) == 2.0
    assert retry_delay_s(policy, 3, 0.0, rng) is None
    assert retry_delay_s(RetryPolicy(max_attempts=1), 1, 0.0, rng) is None
    with pytest.raises(ValueError):
        retry_delay_s(policy, 0, 0.0, rng)


def test_retry_full_jitter_is_uniform_below_the_cap_and_seeded():
    """full: uniform(0, cap), the same draws as the generator itself gives."""
    policy = RetryPolicy(max_attempts=100, base=0.5, multiplier=3.0, max_delay=20.0, jitter="full")
    got = [retry_delay_s(policy, a, 0.0, np.random.default_rng(7)) for a in range(1, 8)]
    caps = [min(20.0, 0.5 * 3.0 ** (a - 1)) for a in range(1, 8)]
    assert got == [np.random.default_rng(7).uniform(0.0, c) for c in caps]
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(11)
    seq_a = [retry_delay_s(policy, a, 0.0, rng_a) for a in range(1, 50)]
    seq_b = [retry_delay_s(policy, a, 0.0, rng_b) for a in range(1, 50)]
    assert seq_a == seq_b
    for a, d in zip(range(1, 50), seq_a):
        assert 0.0 <= d <= min(20.0, 0.5 * 3.0 ** (a - 1))


def test_retry_equal_jitter_is_between_half_cap_and_cap():
    """equal: cap/2 + uniform(0, cap/2)."""
    policy = RetryPolicy(max_attempts=100, base=1.0, max_delay=30.0, jitter="equal")
    rng = np.random.default_rng(3)
    for a in range(1, 60):
        cap = min(30.0, 2.0 ** (a - 1))
        d = retry_delay_s(policy, a, 0.0, rng)
        assert cap / 2 <= d <= cap
    assert retry_delay_s(policy, 3, 0.0, np.random.default_rng(5)) == \
        2.0 + np.random.default_rng(5).uniform(0.0, 2.0)


def test_retry_respects_retry_after():
    """The delay is at least the server's finite Retry-After, even past max_delay;
    an infinite one, or respect_retry_after off, leaves the backoff alone."""
    rng = np.random.default_rng(0)
    policy = RetryPolicy(max_delay=2.0, jitter="none")
    assert retry_delay_s(policy, 1, 3.5, rng) == 3.5
    assert retry_delay_s(policy, 1, 0.5, rng) == 1.0
    assert retry_delay_s(policy, 1, 10.0, rng) == 10.0
    assert retry_delay_s(policy, 1, math.inf, rng) == 1.0
    ignoring = RetryPolicy(max_delay=2.0, jitter="none", respect_retry_after=False)
    assert retry_delay_s(ignoring, 1, 3.5, rng) == 1.0
    full = RetryPolicy(jitter="full")
    assert all(retry_delay_s(full, 2, 1.5, rng) >= 1.5 for _ in range(100))


def test_retry_huge_attempt_does_not_overflow():
    """Far past the cap the delay is max_delay, not an overflow."""
    policy = RetryPolicy(max_attempts=100, jitter="none")
    assert backoff_cap_s(policy, 5000) == 60.0
    assert retry_delay_s(policy, 99, 0.0, np.random.default_rng(0)) == 60.0


def test_retry_policy_validation():
    """Units parse ('500ms'); bad values and unknown keys are config errors."""
    assert RetryPolicy(base="500ms", max_delay="1min").base == 0.5
    assert RetryPolicy(base="500ms", max_delay="1min").max_delay == 60.0
    for bad in ({"max_attempts": 0}, {"max_attempts": 101}, {"multiplier": 0.5}, {"base": 0}, {"max_delay": -1},
                {"jitter": "decorrelated"}, {"retries": 3}):
        with pytest.raises(ValidationError):
            RetryPolicy(**bad)
