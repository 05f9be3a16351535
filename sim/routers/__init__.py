"""Intra-pool routers: pick the replica a request goes to, one policy per module."""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from sim.routers.least_kv import LeastKvConfig, LeastKvRouter
from sim.routers.least_outstanding import LeastOutstandingConfig, LeastOutstandingRouter
from sim.routers.power_of_two import PowerOfTwoConfig, PowerOfTwoRouter
from sim.routers.prefix_affinity import PrefixAffinityConfig, PrefixAffinityRouter
from sim.routers.round_robin import RoundRobinConfig, RoundRobinRouter

RouterConfig = Annotated[Union[RoundRobinConfig, LeastOutstandingConfig, LeastKvConfig,
                               PowerOfTwoConfig, PrefixAffinityConfig],
                         Field(discriminator="type")]

ROUTERS = {
    RoundRobinConfig: RoundRobinRouter,
    LeastOutstandingConfig: LeastOutstandingRouter,
    LeastKvConfig: LeastKvRouter,
    PowerOfTwoConfig: PowerOfTwoRouter,
    PrefixAffinityConfig: PrefixAffinityRouter,
}
