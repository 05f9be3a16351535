"""The interface every autoscaling policy implements.

A policy is pure decision logic: it never touches SimPy. The pool feeds it
metric samples and asks it, every ``tick_s`` seconds, how many replicas it
wants; the current time is always passed in, so a policy can be tested by
calling it with hand-picked times and numbers.

Per tick the pool calls, in this order::

    observe(now_s, {"queue_per_replica": ..., "inflight_per_replica": ...,
                    "kv_util": ..., "ready": ...})
    desired(now_s, current, ready)

Metric samples are per-replica averages over the ready replicas (with no
replica ready, the pool divides by one, so the sample is the pool total).
The optional ``"ready"`` key is the number of replicas the averages were
taken over; a policy that needs totals uses it, or else the ``ready``
passed to the previous ``desired`` call. A TTFT reaches the policy once:
per completed request through ``observe_ttft`` (which gives a true
percentile), or as ``"ttft_s"`` in a sample, not both. Keys a policy does
not use are ignored; a missing, None or NaN value is skipped.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Mapping

from sim.config.common import StrictModel

DEFAULT_TICK_S = 2.0
"""Decision period of policies whose config has no ``tick`` (fixed, scheduled)."""


Problem = tuple[tuple, str]       # (location under the autoscaler block, message)


class AutoscalerConfigBase(StrictModel):
    """The config every autoscaling policy's ``type:`` block extends: what the checks,
    ``fleetsim size`` and the pool may ask of a policy without naming it. A policy
    overrides the answers it has; the defaults describe a policy that asks for its
    pool's own count."""

    # whether the policy may start replicas (to replace lost ones, or to grow); a pool
    # whose policy never does keeps the replicas it is configured with
    starts_replicas: ClassVar[bool] = True
    # whether `fleetsim size --autoscaled` can size it (a target and replica bounds)
    sized_by_target: ClassVar[bool] = False

    def most_replicas(self) -> int:
        """The most replicas it may ask for (0: no bound of its own)."""
        return 0

    def decision_period_s(self) -> float | None:
        """Seconds between two decisions, where the config sets them (None: the default
        tick, :data:`DEFAULT_TICK_S`)."""
        return None

    def problems(self, run_s: float) -> list[Problem]:
        """Settings it would ignore, or that leave the pool nothing to serve with, over a
        run of ``run_s`` seconds (drain included)."""
        return []

    def start_problems(self, cold_start_s: float) -> list[Problem]:
        """Decisions that could never take effect when a new replica takes
        ``cold_start_s`` to start."""
        return []


class Autoscaler(ABC):
    @property
    def tick_s(self) -> float:
        """Seconds between two ``desired`` calls."""
        return DEFAULT_TICK_S

    def observe(self, now_s: float, metrics: Mapping[str, float]) -> None:
        """A sample of the pool's metrics at ``now_s`` (see the module docstring)."""

    def observe_ttft(self, now_s: float, ttft_s: float) -> None:
        """A request completed at ``now_s`` with time to first token ``ttft_s``."""

    @abstractmethod
    def desired(self, now_s: float, current: int, ready: int) -> int:
        """Replica count wanted at ``now_s``.

        ``current`` counts the replicas asked for, starting ones included;
        ``ready`` counts those serving. The pool starts or drains replicas
        to move ``current`` to the answer.
        """
