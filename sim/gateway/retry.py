"""Client retries: capped exponential backoff with jitter.

Follows the AWS Architecture Blog's "Exponential Backoff And Jitter": the
cap for the n-th retry is ``min(max_delay, base * multiplier**(n - 1))``;
"none" waits the cap, "full" a uniform draw in ``[0, cap)``, "equal" half
the cap plus a uniform draw in ``[0, cap / 2)``. With
``respect_retry_after`` the client never comes back before the server's
Retry-After (which may exceed ``max_delay``).
"""
from __future__ import annotations

import math

import numpy as np

from sim.config.retry import RetryPolicy


def backoff_cap_s(policy: RetryPolicy, attempt: int) -> float:
    """``min(max_delay, base * multiplier**(attempt - 1))``, safe for huge attempts."""
    try:
        raw = policy.base * policy.multiplier ** (attempt - 1)
    except OverflowError:
        raw = math.inf
    return min(policy.max_delay, raw)


def retry_delay_s(policy: RetryPolicy, attempt: int, retry_after_s: float,
                  rng: np.random.Generator) -> float | None:
    """Seconds to wait before the next try, or None when tries are used up.

    ``attempt`` is the number of tries made so far (1 after the first
    failure). ``retry_after_s`` is the server's hint (0 when none); an
    infinite hint is ignored here (a request that can never pass should be
    rejected by the caller rather than retried). ``rng`` is drawn from only
    for "full" and "equal" jitter.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts tries made so far and is at least 1, got {attempt}")
    if math.isnan(retry_after_s):
        raise ValueError("retry_after_s is NaN")
    if attempt >= policy.max_attempts:
        return None
    cap = backoff_cap_s(policy, attempt)
    if policy.jitter == "none":
        delay = cap
    elif policy.jitter == "full":
        delay = float(rng.uniform(0.0, cap))
    else:
        delay = cap / 2 + float(rng.uniform(0.0, cap / 2))
    if policy.respect_retry_after and math.isfinite(retry_after_s):
        delay = max(delay, retry_after_s)
    return delay
