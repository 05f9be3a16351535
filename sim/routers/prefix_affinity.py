"""Prefix affinity: requests that share a prompt prefix go to the same replica.

Requests of one prefix group (a shared system prompt, a document being
asked about, or by default one team's traffic to one model) mostly start
with the same tokens. Sending them to the same replica lets its prefix
cache serve those tokens instead of recomputing them, which raises the
prefix-cache hit rate and cuts prefill work and time to first token (the
prefix-cache model builds on this router).

The affinity key is ``req.prefix_group`` when set, else ``"team/model"``.
Keys and replicas are hashed onto a ring (consistent hashing); each
replica owns ``virtual_nodes`` points so arcs even out, and a key belongs
to the first replica clockwise from its point. Adding or removing a
replica moves only the keys on its arcs, so scaling keeps most caches warm.

Pure affinity overloads a replica whose key is hot, so loads are bounded
(consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam,
2018): walking clockwise from the key's point, the request goes to the
first replica whose outstanding count is below
``ceil(load_factor * (total outstanding + 1) / ready replicas)``. Some
replica is always below that bound, so the walk ends; a hot key spills
to the next replicas on the ring, the same ones every time.

Hashes are BLAKE2b of the strings, not Python's ``hash()``, which changes
with ``PYTHONHASHSEED``: the same key lands on the same replica in every
run and process.
"""
from __future__ import annotations

import hashlib
from bisect import bisect_right
from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import BoundedLoadRouter, HasRoom, Replica


class PrefixAffinityConfig(StrictModel):
    """Consistent hashing of each request's prefix group, with bounded loads."""

    type: Literal["prefix_affinity"] = "prefix_affinity"
    virtual_nodes: int = Field(64, ge=1, le=4096,
                               description="Ring points per replica (at most 4,096)")
    load_factor: float = Field(
        1.25, ge=1.0, le=1000.0, allow_inf_nan=False,
        description="A replica takes a request while its outstanding count is below "
                    "ceil(load_factor * (total + 1) / replicas)")


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def affinity_key(req: Request) -> str:
    group = req.prefix_group
    return group if group is not None else f"{req.team}/{req.model}"


class PrefixAffinityRouter(BoundedLoadRouter):
    def __init__(self, cfg: PrefixAffinityConfig,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(cfg.load_factor)
        self.virtual_nodes = cfg.virtual_nodes
        self._points: list[int] = []      # sorted ring points
        self._owners: list[int] = []      # replica index of each point
        self._replica_points: dict[int, list[int]] = {}

    # -- the ring ------------------------------------------------------------------------
    def _points_of(self, index: int) -> list[int]:
        points = self._replica_points.get(index)
        if points is None:
            points = [stable_hash(f"replica-{index}#{v}") for v in range(self.virtual_nodes)]
            self._replica_points[index] = points
        return points

    def _rebuild(self) -> None:
        ring = sorted((p, i) for i in self._ready for p in self._points_of(i))
        self._points = [p for p, _ in ring]
        self._owners = [i for _, i in ring]

    def owner(self, key: str) -> int | None:
        """The replica index owning ``key`` on the ring, ignoring load."""
        if not self._points:
            return None
        return self._owners[bisect_right(self._points, stable_hash(key)) % len(self._points)]

    def on_ready(self, replica: Replica) -> None:
        super().on_ready(replica)
        self._rebuild()

    def on_leave(self, replica: Replica) -> bool:
        if not super().on_leave(replica):
            return False
        self._replica_points.pop(replica.index, None)
        self._rebuild()
        return True

    # -- routing -----------------------------------------------------------------------
    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        points, owners, live, counts = self._points, self._owners, self._ready, self._counts
        if not points:
            return None
        bound = self._bound()
        n = len(points)
        start = bisect_right(points, stable_hash(affinity_key(req)))
        seen: set[int] = set()
        chosen = None
        for k in range(n):
            i = owners[(start + k) % n]
            if i in seen:
                continue
            seen.add(i)
            replica = live[i]
            if counts[i] < bound and (has_room is None or has_room(replica)):
                chosen = replica
                break
            if len(seen) == len(live):
                break
        if chosen is None:                # none under the bound (only with has_room)
            rooms = [r for r in live.values() if has_room is None or has_room(r)]
            if not rooms:
                return None
            chosen = min(rooms, key=lambda r: (counts[r.index], r.index))
        return self._routed(chosen)
