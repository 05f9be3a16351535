"""Intra-pool routers: pick the replica a request goes to, one policy per module."""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from sim.routers.least_outstanding import LeastOutstandingConfig, LeastOutstandingRouter
from sim.routers.round_robin import RoundRobinConfig, RoundRobinRouter

RouterConfig = Annotated[Union[RoundRobinConfig, LeastOutstandingConfig],
                         Field(discriminator="type")]

ROUTERS = {
    RoundRobinConfig: RoundRobinRouter,
    LeastOutstandingConfig: LeastOutstandingRouter,
}
