"""Intra-pool routers."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simfactories import FakeReplica
from sim.routers.least_outstanding import LeastOutstandingConfig, LeastOutstandingRouter
from sim.routers.round_robin import RoundRobinConfig, RoundRobinRouter


@settings(max_examples=200, deadline=None)
@given(num_replicas=st.integers(1, 9),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 1000)), max_size=200))
def test_least_outstanding_picks_the_brute_force_minimum(num_replicas, ops):
    """The heap router always picks min(outstanding, index), like a full scan."""
    replicas = [FakeReplica(i) for i in range(num_replicas)]
    router = LeastOutstandingRouter(LeastOutstandingConfig())
    for r in replicas:
        router.on_ready(r)
    counts = [0] * num_replicas
    for is_submit, k in ops:
        busy = [i for i in range(num_replicas) if counts[i] > 0]
        if is_submit or not busy:
            expected = min(range(num_replicas), key=lambda i: (counts[i], i))
            assert router.pick(None, replicas, None).index == expected
            counts[expected] += 1
        else:
            i = busy[k % len(busy)]
            counts[i] -= 1
            router.on_done(i)


def test_round_robin_cycles_through_replicas():
    """Round robin visits replicas in order, whatever their load."""
    replicas = [FakeReplica(i) for i in range(3)]
    router = RoundRobinRouter(RoundRobinConfig())
    picks = [router.pick(None, replicas, None).index for _ in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    assert np.bincount(picks).tolist() == [3, 2, 2]


def test_least_outstanding_skips_replicas_that_left_and_respects_room():
    """A drained replica is never picked; with a room check, a full least-loaded
    replica means no pick."""
    replicas = [FakeReplica(i) for i in range(3)]
    router = LeastOutstandingRouter(LeastOutstandingConfig())
    for r in replicas:
        router.on_ready(r)
    router.on_leave(replicas[0])
    ready = replicas[1:]
    assert [router.pick(None, ready, None).index for _ in range(4)] == [1, 2, 1, 2]
    assert router.pick(None, ready, lambda r: False) is None
    router.on_done(1)
    assert router.pick(None, ready, None).index == 1


def test_round_robin_skips_replicas_without_room():
    """With a room check, round robin takes the next replica that has room."""
    replicas = [FakeReplica(i) for i in range(3)]
    router = RoundRobinRouter(RoundRobinConfig())
    full = {1}
    picks = [router.pick(None, replicas, lambda r: r.index not in full).index for _ in range(4)]
    assert picks == [0, 2, 0, 2]
    assert router.pick(None, replicas, lambda r: False) is None


def test_the_simulations_replica_gives_routers_all_they_read():
    """Routers are typed against a protocol of what they read (sim.routers.base.Replica),
    not the simulation's class: every member of the protocol is one of
    sim.core.replica.Replica's, with the same kind (a property stays a property, a method a
    method)."""
    import inspect

    from sim.core.replica import Replica as SimulationReplica
    from sim.routers.base import Replica as RouterView

    members = {name for name in vars(RouterView) if not name.startswith("_")}
    assert members == {"index", "num_outstanding", "kv_blocks_total", "kv_used_blocks",
                       "cached_prompt_tokens"}
    for name in members:
        wanted = vars(RouterView)[name]
        if name == "index":                       # a plain attribute of each replica
            assert "index" in inspect.signature(SimulationReplica.__init__).parameters
            continue
        given = inspect.getattr_static(SimulationReplica, name)
        assert isinstance(given, property) == isinstance(wanted, property), name
