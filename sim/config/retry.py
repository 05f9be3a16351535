"""A client's retry policy, as a stream's ``retry:`` writes it (the waits it gives are
:mod:`sim.gateway.retry`'s)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.config.common import Flag, PositiveInt, PositiveSeconds, StrictModel


class RetryPolicy(StrictModel):
    """How a client retries a refused request."""

    max_attempts: Annotated[PositiveInt, Field(le=100)] = 3
    """Total tries including the first (at most 100); 1 means never retry."""
    base: PositiveSeconds = 1.0
    multiplier: Annotated[float, Field(ge=1.0, allow_inf_nan=False)] = 2.0
    max_delay: PositiveSeconds = 60.0
    jitter: Literal["none", "full", "equal"] = "full"
    respect_retry_after: Flag = True

    @model_validator(mode="after")
    def _check(self) -> "RetryPolicy":
        if self.max_delay < self.base:
            raise ValueError(f"max_delay ({self.max_delay:g} s) is below base "
                             f"({self.base:g} s): every wait would be cut to max_delay; "
                             "raise max_delay or lower base")
        return self
