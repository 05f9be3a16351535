"""Target tracking: keep a per-replica metric near a target, Knative-KPA style.

The policy follows the Knative Pod Autoscaler (KPA): two windows over the
same metric, a long *stable* one that drives normal decisions and a short
*panic* one that reacts to bursts, and it adds the tolerance and
cooldowns of AIBrix / Kubernetes HPA and the rate limits of Knative.

Decision, at every tick (``desired(now_s, current, ready)``):

1. **Counts from the windows.** ``effective = target * target_utilization``.
   For ``queue_per_replica`` and ``inflight_per_replica`` (additive: the
   sample is a per-replica average, so the pool's total is
   ``value * ready``) each sample is stored as that total, and
   ``desired_stable = ceil(mean_total_over_stable_window / effective)``;
   ``desired_panic`` is the same over the panic window. ``ttft_p95`` (p95
   of the TTFTs observed in the window) and ``kv_util`` (time-weighted
   mean) do not add up over replicas, so they use the proportional rule
   ``ceil(ready * observed / effective)``; with no replica ready they
   measure nothing and the count is held. Without any sample, hold.
2. **Panic.** With ``ready > 0``, ``desired_panic >= panic_threshold *
   ready`` enters (or prolongs) panic mode; it ends once a full stable
   window has passed without that condition. In panic the answer is
   ``max(desired_panic, current)``: it never scales down. Otherwise the
   answer is ``desired_stable``.
3. **Activation from zero.** With no replica ready and pending work (the
   latest sample shows a queue or requests in flight), ask for at least 1.
4. **Scale to zero** (only with ``min_replicas == 0``): the answer drops to
   0 once the stable window reads no load (or the metric has no data) and
   the pool has been idle (no queue, nothing in flight) for
   ``scale_to_zero_grace``; that step skips the steps below. Until then an
   answer of 0 is raised to 1.
5. **Tolerance.** If ``|answer - current| <= tolerance * current``, keep
   ``current``.
6. **Stable window first.** No scale-down before the policy has a full
   stable window of observations (the first ``stable_window`` seconds).
7. **Cooldowns.** A scale-up within ``scale_up_cooldown`` of the last
   scale-up, or a scale-down within ``scale_down_cooldown`` of the last
   scale-down, keeps ``current`` (the times are those at which this policy
   returned a higher / lower count than ``current``). From zero replicas
   there is no cooldown.
8. **Rate limits** (with ``ready > 0``): an increase stops at
   ``ceil(max_scale_up_rate * ready)``, a decrease at
   ``floor(ready / max_scale_down_rate)``; neither ever reverses the
   direction of the change.
9. **Bounds.** Clamp to ``[min_replicas, max_replicas]``; bounds win over
   everything above.

Everything is a function of the samples and times passed in, so the
policy is deterministic. Times must not go backwards.

Reference settings (the defaults are KPA's, with AIBrix's tolerance and
scale-down cooldown):

* **Knative KPA**: ``target_utilization: 0.7``, ``stable_window: 60s``,
  ``panic_window: 6s`` (10 % of stable), ``panic_threshold: 2.0``,
  ``tick: 2s``, ``scale_to_zero_grace: 30s``, ``max_scale_up_rate: 1000``,
  ``max_scale_down_rate: 2``; KPA has no tolerance or cooldown, so
  ``tolerance: 0``, ``scale_down_cooldown: 0``.
* **AIBrix KPA**: ``stable_window: 180s``, ``panic_window: 60s``,
  ``scale_down_cooldown: 300s``, ``tolerance: 0.1``.
* **Ray Serve**: ``metric: inflight_per_replica``, ``target: 2``
  (``target_ongoing_requests``), ``target_utilization: 1.0``,
  ``scale_up_cooldown: 30s`` (``upscale_delay_s``),
  ``scale_down_cooldown: 600s`` (``downscale_delay_s``). Ray's delays ask
  for a decision to persist that long; a cooldown is the closest
  equivalent here.

``target_utilization`` applies to every metric: for ``ttft_p95`` and
``kv_util``, where the target is usually the limit itself, set it to 1.0.
A ``queue_per_replica`` target counts requests waiting beyond what the
replicas are running, so a small target keeps a short queue.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Mapping

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.config import units
from sim.autoscalers.base import Autoscaler, AutoscalerConfigBase
from sim.autoscalers.window import PercentileWindow, TimeWindow
from sim.config.common import PositiveSeconds, ReplicaCount, ReplicaFloor, Seconds

Metric = Literal["queue_per_replica", "inflight_per_replica", "ttft_p95", "kv_util"]
ADDITIVE_METRICS = ("queue_per_replica", "inflight_per_replica")
"""Per-replica averages of counts: value * ready is the pool total."""
LOAD_KEYS = ("queue_per_replica", "inflight_per_replica")
"""Sample keys that tell whether the pool has work (for activation and scale to zero)."""
TTFT_QUANTILE = 0.95


class TargetConfig(AutoscalerConfigBase):
    type: Literal["target"] = "target"
    metric: Metric = Field(description="What to track, per replica")
    target: float = Field(
        gt=0, allow_inf_nan=False,
        description="Per-replica target: requests for queue/inflight, seconds for ttft_p95 "
                    "(a unit string such as '500ms' is accepted), a fraction for kv_util")
    target_utilization: float = Field(
        0.7, gt=0, le=1, description="Usable fraction of the target (effective target = "
                                     "target * utilization)")
    min_replicas: ReplicaFloor = Field(1, description="Fewest replicas; 0 allows scale to zero")
    max_replicas: ReplicaCount = Field(description="Most replicas")
    stable_window: PositiveSeconds = Field(60.0, description="Averaging window for normal "
                                                             "decisions")
    panic_window: PositiveSeconds = Field(6.0, description="Short window for bursts")
    panic_threshold: float = Field(
        2.0, gt=1, description="Panic when the panic-window count reaches this multiple of "
                               "the ready replicas")
    tolerance: float = Field(0.1, ge=0, lt=1, description="Relative change ignored")
    scale_up_cooldown: Seconds = Field(0.0, description="Least time between two scale-ups")
    scale_down_cooldown: Seconds = Field(300.0, description="Least time between two "
                                                            "scale-downs")
    max_scale_up_rate: float = Field(
        1000.0, gt=1, description="A step up reaches at most ceil(rate * ready)")
    max_scale_down_rate: float = Field(
        2.0, gt=1, description="A step down reaches at least floor(ready / rate)")
    scale_to_zero_grace: Seconds = Field(
        30.0, description="With min_replicas 0: idle time before the last replica goes")
    tick: PositiveSeconds = Field(2.0, description="Seconds between decisions")

    sized_by_target: ClassVar[bool] = True

    def most_replicas(self) -> int:
        return self.max_replicas

    def decision_period_s(self) -> float | None:
        return self.tick

    @field_validator("target", mode="before")
    @classmethod
    def _target_units(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and info.data.get("metric") == "ttft_p95":
            return units.seconds(value)
        return value

    @model_validator(mode="after")
    def _check(self) -> "TargetConfig":
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) must be at least "
                             f"min_replicas ({self.min_replicas})")
        if self.panic_window > self.stable_window:
            raise ValueError(f"panic_window ({self.panic_window:g} s) must not be longer than "
                             f"stable_window ({self.stable_window:g} s)")
        if self.min_replicas > 0 and \
                self.scale_to_zero_grace != type(self).model_fields["scale_to_zero_grace"].default:
            raise ValueError("scale_to_zero_grace applies only with min_replicas: 0 (the "
                             "pool never scales to zero otherwise)")
        if self.metric == "kv_util" and self.target > 1:
            raise ValueError(f"a kv_util target is a fraction of the KV cache (at most 1), "
                             f"got {self.target:g}")
        return self


def _ceil(x: float) -> int:
    """Ceiling that ignores float noise: 2.0000000000000004 -> 2, not 3."""
    return max(math.ceil(round(x, 9)), 0)


def _value(metrics: Mapping[str, float], key: str) -> float | None:
    value = metrics.get(key)
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class TargetAutoscaler(Autoscaler):
    def __init__(self, cfg: TargetConfig) -> None:
        self.cfg = cfg
        self._effective = cfg.target * cfg.target_utilization
        self._additive = cfg.metric in ADDITIVE_METRICS
        self._ttft = cfg.metric == "ttft_p95"
        window = PercentileWindow if self._ttft else TimeWindow
        self._stable = window(cfg.stable_window)
        self._panic = window(cfg.panic_window)
        self._first_obs_s: float | None = None    # when the first observation came
        self._last_ready: int | None = None       # ready at the latest decision
        self._busy = False                         # latest sample shows work
        self._idle_since_s: float | None = None   # start of the current idle stretch
        self._panic_last_s: float | None = None   # last time the panic condition held
        self._last_up_s = -math.inf
        self._last_down_s = -math.inf

    @property
    def tick_s(self) -> float:
        return self.cfg.tick

    @property
    def panicking(self) -> bool:
        """Whether the latest decision was taken in panic mode."""
        return self._panic_last_s is not None

    # -- observations ------------------------------------------------------------------
    def observe(self, now_s: float, metrics: Mapping[str, float]) -> None:
        if self._ttft:
            ttft_s = _value(metrics, "ttft_s")
            if ttft_s is not None:
                self.observe_ttft(now_s, ttft_s)
            value = None
        else:
            value = _value(metrics, self.cfg.metric)
            if value is not None:
                self._seen(now_s)
                if self._additive:
                    n = _value(metrics, "ready")
                    if n is None:
                        n = self._last_ready or 0
                    value *= max(n, 1.0)
                self._stable.add(now_s, value)
                self._panic.add(now_s, value)
        work = [x for x in (_value(metrics, k) for k in LOAD_KEYS) if x is not None]
        if not work and value is not None:
            work = [value]                          # kv_util alone: in use means work
        if work:
            self._busy = any(x > 0 for x in work)
            if self._busy:
                self._idle_since_s = None
            elif self._idle_since_s is None:
                self._idle_since_s = now_s

    def observe_ttft(self, now_s: float, ttft_s: float) -> None:
        if self._ttft and math.isfinite(ttft_s):
            self._seen(now_s)
            self._stable.add(now_s, ttft_s)
            self._panic.add(now_s, ttft_s)

    def _seen(self, now_s: float) -> None:
        if self._first_obs_s is None:
            self._first_obs_s = now_s

    def _read(self, window: TimeWindow | PercentileWindow, now_s: float) -> float | None:
        if self._ttft:
            return window.quantile(now_s, TTFT_QUANTILE)
        return window.mean(now_s)

    def _counts(self, now_s: float, ready: int) -> tuple[int | None, int | None]:
        """(desired_stable, desired_panic); None where nothing is measured."""
        stable = self._read(self._stable, now_s)
        panic = self._read(self._panic, now_s)
        if stable is None:
            return None, None
        if self._additive:
            scale = 1.0
        elif ready == 0:
            return None, None
        else:
            scale = float(ready)
        ds = _ceil(scale * stable / self._effective)
        dp = None if panic is None else _ceil(scale * panic / self._effective)
        return ds, dp

    # -- decision ------------------------------------------------------------------------
    def desired(self, now_s: float, current: int, ready: int) -> int:
        cfg = self.cfg
        self._last_ready = ready
        ds, dp = self._counts(now_s, ready)

        if dp is not None and ready > 0 and dp >= cfg.panic_threshold * ready:
            self._panic_last_s = now_s
        elif self._panic_last_s is not None and now_s - self._panic_last_s >= cfg.stable_window:
            self._panic_last_s = None
        if self._panic_last_s is not None:
            proposal = max(dp if dp is not None else 0, current)
        else:
            proposal = ds if ds is not None else current

        if ready == 0 and self._busy:
            proposal = max(proposal, 1)

        window_full = (self._first_obs_s is not None
                       and now_s - self._first_obs_s >= cfg.stable_window)
        idle_s = now_s - self._idle_since_s if self._idle_since_s is not None else -math.inf
        if (cfg.min_replicas == 0 and not self.panicking and window_full
                and ds in (None, 0) and idle_s >= cfg.scale_to_zero_grace):
            return self._record(now_s, current, 0)
        if proposal == 0 and current > 0:
            proposal = 1                            # zero only through the grace above

        if abs(proposal - current) <= cfg.tolerance * current:
            proposal = current
        if proposal < current and not window_full:
            proposal = current
        if current > 0:
            if proposal > current and now_s - self._last_up_s < cfg.scale_up_cooldown:
                proposal = current
            if proposal < current and now_s - self._last_down_s < cfg.scale_down_cooldown:
                proposal = current
        if ready > 0:
            if proposal > current:
                proposal = min(proposal, max(current, _ceil(cfg.max_scale_up_rate * ready)))
            elif proposal < current:
                floor = math.floor(round(ready / cfg.max_scale_down_rate, 9))
                proposal = max(proposal, min(current, floor))
        proposal = min(max(proposal, cfg.min_replicas), cfg.max_replicas)
        return self._record(now_s, current, proposal)

    def _record(self, now_s: float, current: int, answer: int) -> int:
        if answer > current:
            self._last_up_s = now_s
        elif answer < current:
            self._last_down_s = now_s
        return answer
