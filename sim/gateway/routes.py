"""Where a request goes, pool after pool: one place for a served model's route.

A route picks the first pool of each request (a weighted split, short or long
prompts, a cascade's small model, a disaggregated prefill pool) and says what
happens when that pool is done with it: nothing (the request is complete), a
hand-off of its prompt's KV cache to the decode pool, or an escalation to the
cascade's larger model. A refusal on the way undoes what the route set up. The
simulation carries out what the route decides (timers, KV transfer times); the
gateway only asks the route.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config.gateway import DisaggregatedConfig, ServedModelConfig
from sim.entities.request import Request


@dataclass(frozen=True)
class HandOff:
    """The prompt is done: send its KV cache over ``link`` to ``pool``, which decodes."""

    pool: str
    link: DisaggregatedConfig


@dataclass(frozen=True)
class Escalate:
    """The answer was not enough: ``pool`` starts the request over."""

    pool: str


Next = HandOff | Escalate | None


class Route:
    """A stream sent straight to one pool (no served model, or one pool)."""

    def __init__(self, pool: str) -> None:
        self.pool = pool

    def first_pool(self, req: Request, rng: np.random.Generator) -> str:
        return self.pool

    def when_done(self, req: Request, rng: np.random.Generator) -> Next:
        """What follows once the pool ``req.pool`` finished ``req``."""
        return None

    def undo(self, req: Request) -> None:
        """``req`` was refused on the way: take back what ``first_pool`` set up."""


class WeightedRoute(Route):
    """A canary split: each request to one of the pools, in proportion to the weights."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.names = list(weights)
        w = np.array([weights[n] for n in self.names], dtype=np.float64)
        self.p = w / w.sum()

    def first_pool(self, req: Request, rng: np.random.Generator) -> str:
        return self.names[int(rng.choice(len(self.names), p=self.p))]


class LengthRoute(Route):
    """Prompts at or above the threshold to one pool, the others to another."""

    def __init__(self, threshold_tokens: int, short: str, long: str) -> None:
        self.threshold_tokens, self.short, self.long = threshold_tokens, short, long

    def first_pool(self, req: Request, rng: np.random.Generator) -> str:
        return self.long if req.prompt_tokens >= self.threshold_tokens else self.short


class CascadeRoute(Route):
    """The small model first; a share of its answers (drawn) go on to the large one."""

    def __init__(self, first: str, then: str, escalation: float) -> None:
        self.first, self.then, self.escalation = first, then, escalation

    def first_pool(self, req: Request, rng: np.random.Generator) -> str:
        return self.first

    def when_done(self, req: Request, rng: np.random.Generator) -> Next:
        if req.pool == self.first and rng.random() < self.escalation:
            return Escalate(self.then)
        return None


class DisaggregatedRoute(Route):
    """The prefill pool computes the prompt and the first token; the decode pool the
    rest, once the KV cache has crossed the link."""

    def __init__(self, link: DisaggregatedConfig) -> None:
        self.link = link

    def first_pool(self, req: Request, rng: np.random.Generator) -> str:
        req.handoff = (self.link.decode, req.max_output_tokens, self.link)
        req.max_output_tokens = 1
        return self.link.prefill

    def when_done(self, req: Request, rng: np.random.Generator) -> Next:
        if req.handoff is not None and req.num_output_tokens < req.handoff[1]:
            return HandOff(self.link.decode, self.link)
        return None

    def undo(self, req: Request) -> None:
        if req.handoff is not None:
            req.max_output_tokens = req.handoff[1]
            req.handoff = None


def build_route(served: ServedModelConfig | None, default_pool: str) -> Route:
    """The route of a stream: its served model's, or straight to ``default_pool``."""
    if served is None:
        return Route(default_pool)
    if served.cascade is not None:
        return CascadeRoute(served.cascade.first, served.cascade.then,
                            served.cascade.escalation)
    if served.disaggregated is not None:
        return DisaggregatedRoute(served.disaggregated)
    if served.by_prompt_length is not None:
        rule = served.by_prompt_length
        return LengthRoute(rule.threshold_tokens, rule.short, rule.long)
    if len(served.pools) == 1:
        return Route(next(iter(served.pools)))
    return WeightedRoute(dict(served.pools))
