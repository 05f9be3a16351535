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

from sim.autoscalers.base import Autoscaler, AutoscalerConfigBase
from sim.autoscalers.fixed import FixedAutoscaler, FixedConfig
from sim.autoscalers.scheduled import ScheduledAutoscaler, ScheduledConfig
from sim.autoscalers.target import TargetAutoscaler, TargetConfig
from sim.config.policies import Family

AUTOSCALERS = Family("autoscaler", {
    FixedConfig: FixedAutoscaler,
    TargetConfig: TargetAutoscaler,
    ScheduledConfig: ScheduledAutoscaler,
}, base=AutoscalerConfigBase)
AutoscalerConfig = AUTOSCALERS.union()


def build_autoscaler(cfg) -> Autoscaler:
    """The policy object for a validated config block."""
    return AUTOSCALERS.built_by(cfg)(cfg)


__all__ = ["AUTOSCALERS", "Autoscaler", "AutoscalerConfig", "FixedAutoscaler", "FixedConfig",
           "ScheduledAutoscaler", "ScheduledConfig", "TargetAutoscaler", "TargetConfig",
           "build_autoscaler"]
