"""The pool metrics an autoscaler samples, each a function of what a pool shows.

A pool hands a :class:`PoolView` (its queue, the requests in its engine front end, its
ready replicas) once a tick; every function here turns it into one number, and the pool
passes the autoscaler the mapping ``{name: value}``. A new metric is one function added
to :data:`METRICS` (and, for ``target``, its name to the ``metric`` choices): no pool code
changes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol


class ReadyReplica(Protocol):
    """What a metric may read of a ready replica."""

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_outstanding(self) -> int: ...

    kv_blocks_total: int

    def kv_used_blocks(self) -> int: ...


class PoolView(NamedTuple):
    queued: int                       # waiting in the pool's own queue
    in_front_end: int                 # in the engine's front end, not yet queued
    ready: Sequence[ReadyReplica]


def _per_ready(view: PoolView) -> int:
    """The averages' divisor: the ready replicas (one when none is: the pool's total)."""
    return max(len(view.ready), 1)


def queue_per_replica(view: PoolView) -> float:
    """Requests waiting (the pool's queue and the replicas' own) per ready replica."""
    return (view.queued + sum(r.num_waiting for r in view.ready)) / _per_ready(view)


def inflight_per_replica(view: PoolView) -> float:
    """Requests in flight at the pool (queued, in the front end, at a replica) per ready
    replica."""
    outstanding = (view.queued + view.in_front_end
                   + sum(r.num_outstanding for r in view.ready))
    return outstanding / _per_ready(view)


def kv_util(view: PoolView) -> float:
    """Share of the ready replicas' KV blocks in use."""
    return (sum(r.kv_used_blocks() for r in view.ready)
            / max(sum(r.kv_blocks_total for r in view.ready), 1))


def ready(view: PoolView) -> float:
    """The replicas the averages were taken over."""
    return float(len(view.ready))


METRICS: dict[str, Callable[[PoolView], float]] = {
    "queue_per_replica": queue_per_replica,
    "inflight_per_replica": inflight_per_replica,
    "kv_util": kv_util,
    "ready": ready,
}


def sample(view: PoolView) -> dict[str, float]:
    """Every metric of ``view``."""
    return {name: metric(view) for name, metric in METRICS.items()}
