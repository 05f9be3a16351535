"""Intra-pool routers: pick the replica a request goes to, one policy per module."""
from __future__ import annotations

from sim.routers.least_kv import LeastKvConfig, LeastKvRouter
from sim.routers.least_outstanding import LeastOutstandingConfig, LeastOutstandingRouter
from sim.routers.longest_prefix import LongestPrefixConfig, LongestPrefixRouter
from sim.routers.power_of_two import PowerOfTwoConfig, PowerOfTwoRouter
from sim.routers.prefix_affinity import PrefixAffinityConfig, PrefixAffinityRouter
from sim.routers.round_robin import RoundRobinConfig, RoundRobinRouter
from sim.config.common import StrictModel
from sim.config.policies import Family

ROUTERS = Family("router", {
    RoundRobinConfig: RoundRobinRouter,
    LeastOutstandingConfig: LeastOutstandingRouter,
    LeastKvConfig: LeastKvRouter,
    PowerOfTwoConfig: PowerOfTwoRouter,
    PrefixAffinityConfig: PrefixAffinityRouter,
    LongestPrefixConfig: LongestPrefixRouter,
}, base=StrictModel)     # a router is asked nothing before it is built
RouterConfig = ROUTERS.union()
