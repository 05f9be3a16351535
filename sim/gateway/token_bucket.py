"""Token bucket: a rate limit with a burst allowance.

The bucket refills continuously at ``rate_per_s`` up to ``burst`` tokens.
A take of ``amount`` tokens succeeds when that many are available and
deducts them; otherwise it deducts nothing and says how long to wait until
they would be. The same class serves a requests-per-minute limit (amount 1
per request) and a tokens-per-minute limit (amount = prompt + max output
tokens, with :meth:`TokenBucket.refund` returning what a request reserved
but did not use).

Pure and deterministic: nothing here knows about SimPy; the caller passes
the simulated time ``now_s``, which must never go backwards.
"""
from __future__ import annotations

import math

# Slack on "enough tokens?" (relative to the take, plus a sliver of the
# burst), so a caller that comes back exactly ``retry_after`` seconds later
# passes even when the refill was summed over several calls in between.
# The overdraw this allows is negligible.
_REL_TOL = 1e-9
_BURST_TOL = 1e-12


class TokenBucket:
    """Continuously refilling bucket of ``burst`` tokens at ``rate_per_s``.

    ``initial`` is the fill at ``now_s`` (the creation time, 0 unless
    given); it defaults to a full bucket.
    """

    __slots__ = ("rate_per_s", "burst", "_tokens", "_last_s")

    def __init__(self, rate_per_s: float, burst: float, initial: float | None = None,
                 *, now_s: float = 0.0) -> None:
        if not (math.isfinite(rate_per_s) and rate_per_s >= 0):
            raise ValueError(f"rate_per_s must be finite and at least 0, got {rate_per_s}")
        if not (math.isfinite(burst) and burst > 0):
            raise ValueError(f"burst must be finite and greater than 0, got {burst}")
        tokens = float(burst) if initial is None else float(initial)
        if not 0 <= tokens <= burst:
            raise ValueError(f"initial must lie in [0, burst={burst}], got {initial}")
        self.rate_per_s = float(rate_per_s)
        self.burst = float(burst)
        self._tokens = tokens
        self._last_s = float(now_s)

    @classmethod
    def per_minute(cls, limit_per_min: float, burst: float | None = None,
                   *, now_s: float = 0.0) -> TokenBucket:
        """A full bucket for a per-minute limit: rate limit/60, burst = limit by default."""
        return cls(limit_per_min / 60.0, limit_per_min if burst is None else burst, now_s=now_s)

    def _refill(self, now_s: float) -> None:
        assert now_s >= self._last_s, f"time went backwards: {now_s} < {self._last_s}"
        if now_s > self._last_s:
            self._tokens = min(self.burst, self._tokens + self.rate_per_s * (now_s - self._last_s))
            self._last_s = now_s

    def available(self, now_s: float) -> float:
        """Tokens in the bucket at ``now_s``."""
        self._refill(now_s)
        return self._tokens

    def try_take(self, now_s: float, amount: float) -> float:
        """Take ``amount`` tokens at ``now_s`` if they are there.

        Returns 0.0 when taken; otherwise takes nothing and returns the
        seconds until ``amount`` tokens will be available (``inf`` if
        ``amount`` exceeds ``burst`` or the bucket never refills).
        """
        if not (math.isfinite(amount) and amount >= 0):
            raise ValueError(f"amount must be finite and at least 0, got {amount}")
        self._refill(now_s)
        need = amount * (1.0 - _REL_TOL) - self.burst * _BURST_TOL
        if self._tokens >= need:
            self._tokens = max(0.0, self._tokens - amount)
            return 0.0
        if amount > self.burst or self.rate_per_s == 0:
            return math.inf
        # The exact wait, nudged up by a few ulps where float rounding would
        # leave the bucket just short at now_s + wait.
        ready_s = now_s + (amount - self._tokens) / self.rate_per_s
        while self._tokens + self.rate_per_s * (ready_s - now_s) < need:
            ready_s = math.nextafter(ready_s, math.inf)
        wait = ready_s - now_s
        while now_s + wait < ready_s:
            wait = math.nextafter(wait, math.inf)
        return wait

    def refund(self, amount: float, now_s: float | None = None) -> None:
        """Put back ``amount`` tokens (reserved but not used), capped at ``burst``.

        With ``now_s`` the bucket is first refilled to that time, so the
        cap applies to the fill at ``now_s``.
        """
        if not (math.isfinite(amount) and amount >= 0):
            raise ValueError(f"amount must be finite and at least 0, got {amount}")
        if now_s is not None:
            self._refill(now_s)
        self._tokens = min(self.burst, self._tokens + amount)

    def __repr__(self) -> str:
        return (f"TokenBucket(rate_per_s={self.rate_per_s!r}, burst={self.burst!r}, "
                f"tokens={self._tokens!r} at {self._last_s!r}s)")
