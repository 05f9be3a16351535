"""Least KV cache use: the ready replica whose KV cache is emptiest.

Outstanding-request counts treat a 100-token chat and a 100k-token
document alike; under long contexts the replica with the fewest requests
may be the one closest to running out of KV blocks, and a full cache means
preemption (recompute) and wasted GPU time. Sending each request to the
replica with the most free KV keeps caches balanced in the resource that
actually runs out. Ties (e.g. all caches empty) go to the fewest
outstanding requests, then to the lowest replica index.

A pick scans every ready replica, O(replicas): KV use changes on every
step of every replica (prefill grows it, finishing requests free it), so
an index kept up to date would cost more than the scan it saves. Pools
have tens of replicas, not thousands.
"""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import HasRoom, Replica, Router


class LeastKvConfig(StrictModel):
    """Route to the ready replica with the lowest KV cache use."""

    type: Literal["least_kv"] = "least_kv"


def kv_fraction(replica: Replica) -> float:
    """Share of the replica's KV blocks in use now (live, mid fast-forward too)."""
    total = replica.kv_blocks_total
    return replica.kv_used_blocks() / total if total else 0.0


class LeastKvRouter(Router):
    def __init__(self, cfg: LeastKvConfig, rng: np.random.Generator | None = None) -> None:
        pass

    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        best = None
        best_key = None
        for replica in ready:
            if has_room is not None and not has_room(replica):
                continue
            key = (kv_fraction(replica), replica.num_outstanding, replica.index)
            if best_key is None or key < best_key:
                best, best_key = replica, key
        return best
