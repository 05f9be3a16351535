"""Autoscalers: how many replicas a pool wants, tick by tick.

A policy is pure decision logic (no SimPy): the pool feeds it metric
samples (``observe``, ``observe_ttft``) and asks ``desired(now_s, current,
ready)`` every ``tick_s`` seconds; see :mod:`sim.autoscalers.base`.

* ``fixed``: keep the current count.
* ``target``: track a per-replica metric (queue, in flight, TTFT p95, KV
  use) with stable and panic windows, Knative-KPA style, plus AIBrix's
  tolerance and cooldowns; see :mod:`sim.autoscalers.target` for the
  decision and the reference settings of Knative, AIBrix and Ray Serve.
* ``scheduled``: a replica count by time of day.
"""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from sim.autoscalers.base import Autoscaler
from sim.autoscalers.fixed import FixedAutoscaler, FixedConfig
from sim.autoscalers.scheduled import ScheduledAutoscaler, ScheduledConfig
from sim.autoscalers.target import TargetAutoscaler, TargetConfig

AutoscalerConfig = Annotated[Union[FixedConfig, TargetConfig, ScheduledConfig],
                             Field(discriminator="type")]

_POLICIES: dict[type, type[Autoscaler]] = {
    FixedConfig: FixedAutoscaler,
    TargetConfig: TargetAutoscaler,
    ScheduledConfig: ScheduledAutoscaler,
}


def build_autoscaler(cfg: FixedConfig | TargetConfig | ScheduledConfig) -> Autoscaler:
    """The policy object for a validated config block."""
    try:
        policy = _POLICIES[type(cfg)]
    except KeyError:
        raise TypeError(f"not an autoscaler config: {type(cfg).__name__}") from None
    return policy(cfg)


__all__ = ["Autoscaler", "AutoscalerConfig", "FixedAutoscaler", "FixedConfig",
           "ScheduledAutoscaler", "ScheduledConfig", "TargetAutoscaler", "TargetConfig",
           "build_autoscaler"]
