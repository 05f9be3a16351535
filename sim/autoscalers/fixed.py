"""Fixed: keep whatever replica count the pool has; never scale."""
from __future__ import annotations

from typing import ClassVar, Literal

from sim.autoscalers.base import Autoscaler, AutoscalerConfigBase


class FixedConfig(AutoscalerConfigBase):
    type: Literal["fixed"] = "fixed"
    # whether the policy may start replicas (to replace lost ones, or to grow)
    starts_replicas: ClassVar[bool] = False


class FixedAutoscaler(Autoscaler):
    def __init__(self, cfg: FixedConfig) -> None:
        self.cfg = cfg

    def desired(self, now_s: float, current: int, ready: int) -> int:
        return current
