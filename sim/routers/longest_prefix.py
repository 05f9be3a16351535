"""Longest cached prefix: the replica whose prefix cache holds the most of the prompt.

Where ``prefix_affinity`` hashes a key (a prefix group, a conversation, a trace's first
block ids) and sends every request with it to one replica, this router asks each ready
replica's cache how many of the request's leading prompt tokens it holds now, exactly as
admission would find them, and goes where that is longest: a conversation's next turn
goes where its earlier turns still are, and a trace's prompt where the most of its named
blocks are, even when two prompts share only a system prompt or a document. It is the
router of cache-aware gateways that see their workers' caches (llm-d's KV-cache scorer,
SGLang's cache-aware router, which keeps an approximate tree of what it sent instead).

Loads are bounded as ``prefix_affinity`` bounds them: only replicas whose outstanding
count is below ``ceil(load_factor * (total outstanding + 1) / ready replicas)`` compete,
so a hot prefix spills to others rather than queueing on one replica. A match shorter
than ``min_cached_fraction`` of the prompt counts as none. Ties (no match at all, most
often) go to the fewest outstanding requests, then the lowest replica index, so routing
is deterministic.

A pick asks every ready replica's cache: O(replicas x cached blocks of the prompt).
"""
from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import BoundedLoadRouter, HasRoom, Replica


class LongestPrefixConfig(StrictModel):
    """The ready replica holding the longest cached prefix of the prompt, loads bounded."""

    type: Literal["longest_prefix"] = "longest_prefix"
    load_factor: float = Field(
        1.25, ge=1.0, le=1000.0, allow_inf_nan=False,
        description="A replica competes while its outstanding count is below "
                    "ceil(load_factor * (total + 1) / replicas)")
    min_cached_fraction: float = Field(
        0.0, ge=0.0, le=1.0, allow_inf_nan=False,
        description="A cached prefix shorter than this share of the prompt counts as no "
                    "match (the request goes by load alone)")


class LongestPrefixRouter(BoundedLoadRouter):
    def __init__(self, cfg: LongestPrefixConfig,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(cfg.load_factor)
        self.min_cached_fraction = cfg.min_cached_fraction

    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        live, counts = self._ready, self._counts
        if not live:
            return None
        bound = self._bound()
        least = math.ceil(self.min_cached_fraction * req.prompt_tokens)
        best = best_rank = None
        fallback = fallback_rank = None       # the least loaded with room, bound or not
        for i in sorted(live):
            replica = live[i]
            if has_room is not None and not has_room(replica):
                continue
            rank = (counts[i], i)
            if fallback_rank is None or rank < fallback_rank:
                fallback, fallback_rank = replica, rank
            if counts[i] >= bound:
                continue
            cached = replica.cached_prompt_tokens(req)
            rank = (-(cached if cached and cached >= least else 0), counts[i], i)
            if best_rank is None or rank < best_rank:
                best, best_rank = replica, rank
        chosen = best if best is not None else fallback
        return None if chosen is None else self._routed(chosen)
