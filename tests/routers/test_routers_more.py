"""Least-KV, power-of-two-choices and prefix-affinity routers."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

import sim
from simfactories import FakeReplica
from sim.config.scenario import Scenario
from sim.entities.request import Request
from sim.routers import ROUTERS, RouterConfig
from sim.routers.least_kv import LeastKvConfig, LeastKvRouter
from sim.routers.power_of_two import PowerOfTwoConfig, PowerOfTwoRouter
from sim.routers.prefix_affinity import (PrefixAffinityConfig, PrefixAffinityRouter,
                                         affinity_key)

ROOT = Path(__file__).resolve().parents[2]


def req(team: str = "a", model: str = "m", prefix_group: str | None = None) -> Request:
    r = Request(0, 0, team, model, "p", 1, 0.0, 10, 10)
    r.prefix_group = prefix_group
    return r


def key_req(key: str) -> Request:
    return req(prefix_group=key)


# -- least KV ----------------------------------------------------------------------------
def test_least_kv_picks_the_emptiest_cache_by_fraction():
    """The lowest share of KV blocks in use wins, not the fewest requests nor the
    fewest blocks (replicas may have caches of different sizes)."""
    replicas = [FakeReplica(0, outstanding=1, used_blocks=50),
                FakeReplica(1, outstanding=9, used_blocks=10),
                FakeReplica(2, outstanding=0, used_blocks=30, num_blocks=1000)]
    router = LeastKvRouter(LeastKvConfig())
    assert router.pick(None, replicas, None).index == 2          # 3 % beats 10 %
    replicas[2].used_blocks = 500
    assert router.pick(None, replicas, None).index == 1


def test_least_kv_ties_go_to_fewest_outstanding_then_lowest_index():
    """Equal KV use (e.g. all caches empty) falls back to load, then index."""
    replicas = [FakeReplica(i, outstanding=o) for i, o in enumerate([2, 1, 1, 3])]
    router = LeastKvRouter(LeastKvConfig())
    assert router.pick(None, replicas, None).index == 1
    replicas[1].num_outstanding = 5
    assert router.pick(None, replicas, None).index == 2


def test_least_kv_respects_room_and_replicas_that_left():
    """Only replicas with room are candidates (None when none has room); a replica
    no longer in the ready list is never picked, however empty its cache."""
    replicas = [FakeReplica(0, used_blocks=0), FakeReplica(1, used_blocks=40),
                FakeReplica(2, used_blocks=20)]
    router = LeastKvRouter(LeastKvConfig())
    router.on_ready(replicas[0])
    assert router.pick(None, replicas, lambda r: r.index != 0).index == 2
    assert router.pick(None, replicas, lambda r: False) is None
    router.on_leave(replicas[0])
    assert router.pick(None, replicas[1:], None).index == 2


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 5), st.booleans()),
                min_size=1, max_size=8))
def test_least_kv_matches_a_brute_force_minimum(spec):
    """For any loads, the pick is min(kv fraction, outstanding, index) over
    replicas with room."""
    replicas = [FakeReplica(i, outstanding=o, used_blocks=u) for i, (u, o, _) in enumerate(spec)]
    room = {i for i, (_, _, has) in enumerate(spec) if has}
    router = LeastKvRouter(LeastKvConfig())
    got = router.pick(None, replicas, lambda r: r.index in room)
    candidates = [r for r in replicas if r.index in room]
    if not candidates:
        assert got is None
    else:
        assert got is min(candidates, key=lambda r: (r.kv_usage, r.num_outstanding, r.index))


# -- power of two choices ----------------------------------------------------------------
class RecordingP2c(PowerOfTwoRouter):
    """Remembers the replicas it sampled for the last pick."""

    def sample(self, ready):
        self.last = super().sample(ready)
        return self.last


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       loads=st.lists(st.integers(0, 6), min_size=1, max_size=9))
def test_p2c_never_picks_the_more_loaded_sample(seed, loads):
    """The pick is one of two distinct samples and never the busier one (ties to
    the lower index)."""
    replicas = [FakeReplica(i, outstanding=o) for i, o in enumerate(loads)]
    router = RecordingP2c(PowerOfTwoConfig(), np.random.default_rng(seed))
    for _ in range(20):
        got = router.pick(None, replicas, None)
        sampled = router.last
        assert len(sampled) == min(2, len(replicas))
        assert len({r.index for r in sampled}) == len(sampled)
        assert got is min(sampled, key=lambda r: (r.num_outstanding, r.index))


def test_p2c_samples_pairs_uniformly():
    """Every unordered pair of 4 replicas is sampled about equally often."""
    replicas = [FakeReplica(i) for i in range(4)]
    router = PowerOfTwoRouter(PowerOfTwoConfig(), np.random.default_rng(1))
    counts: dict[tuple[int, int], int] = {}
    for _ in range(6000):
        a, b = router.sample(replicas)
        pair = tuple(sorted((a.index, b.index)))
        counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 6
    assert all(800 < c < 1200 for c in counts.values()), counts


def test_p2c_is_deterministic_per_seed():
    """The same seed gives the same picks; another seed gives others."""
    def picks(seed):
        replicas = [FakeReplica(i) for i in range(6)]
        router = PowerOfTwoRouter(PowerOfTwoConfig(), np.random.default_rng(seed))
        out = []
        for k in range(200):
            r = router.pick(None, replicas, None)
            r.num_outstanding += 1
            if k % 3 == 0:
                replicas[k % 6].num_outstanding = max(replicas[k % 6].num_outstanding - 2, 0)
            out.append(r.index)
        return out

    assert picks(7) == picks(7)
    assert picks(7) != picks(8)


def test_p2c_spreads_load():
    """With random completions at about 10 outstanding per replica, the busiest of
    16 replicas stays near the mean (and better than random routing)."""
    def worst_ratio(router_pick, seed=0):
        rng = np.random.default_rng(seed)
        replicas = [FakeReplica(i) for i in range(16)]
        target, worst = 160, 0.0
        for step in range(30000):
            total = sum(r.num_outstanding for r in replicas)
            if total < target:
                router_pick(replicas).num_outstanding += 1
            else:                      # a uniformly random outstanding request ends
                loads = np.array([r.num_outstanding for r in replicas])
                victim = rng.choice(len(replicas), p=loads / loads.sum())
                replicas[victim].num_outstanding -= 1
            if step > 2000 and total == target:
                loads = [r.num_outstanding for r in replicas]
                worst = max(worst, max(loads) / np.mean(loads))
        return worst

    router = PowerOfTwoRouter(PowerOfTwoConfig(), np.random.default_rng(3))
    p2c = worst_ratio(lambda ready: router.pick(None, ready, None))
    rand_rng = np.random.default_rng(3)
    rand = worst_ratio(lambda ready: ready[rand_rng.integers(len(ready))])
    assert p2c < 1.6, p2c
    assert p2c < rand, (p2c, rand)


def test_p2c_falls_back_to_any_replica_with_room():
    """If neither sample has room, the least loaded replica with room is taken; with
    none, no pick. One ready replica is sampled alone."""
    replicas = [FakeReplica(i, outstanding=o) for i, o in enumerate([5, 3, 4, 1])]
    router = RecordingP2c(PowerOfTwoConfig(), np.random.default_rng(0))
    for _ in range(30):
        got = router.pick(None, replicas, lambda r: r.index in (0, 2))
        sampled = {r.index for r in router.last} & {0, 2}
        if sampled == {0}:
            assert got.index == 0
        else:
            assert got.index == 2          # sampled (the less loaded), or the fallback
    assert router.pick(None, replicas, lambda r: False) is None
    assert router.pick(None, replicas[:1], None) is replicas[0]
    assert [r.index for r in router.last] == [0]


# -- prefix affinity ---------------------------------------------------------------------
def affinity(n: int, **cfg) -> tuple[PrefixAffinityRouter, list[FakeReplica]]:
    replicas = [FakeReplica(i) for i in range(n)]
    router = PrefixAffinityRouter(PrefixAffinityConfig(**cfg))
    for r in replicas:
        router.on_ready(r)
    return router, replicas


def route_idle(router, replicas, key: str) -> int:
    """Route ``key`` with every replica idle: the request ends at once."""
    got = router.pick(key_req(key), replicas, None)
    router.on_done(got.index)
    return got.index


def test_affinity_key_is_prefix_group_else_team_and_model():
    """A request's prefix group is its key; without one, its team and model."""
    assert affinity_key(req("a", "llama")) == "a/llama"
    assert affinity_key(req("a", "llama", prefix_group="doc-7")) == "doc-7"


def test_same_key_goes_to_the_same_replica_while_loads_are_even():
    """Repeated requests of a key land on its ring owner; so do requests of one team
    and model without a prefix group."""
    router, replicas = affinity(8)
    for key in ("sys-prompt-1", "doc-42", "a/llama"):
        owner = router.owner(key)
        assert {route_idle(router, replicas, key) for _ in range(50)} == {owner}
    team_owner = router.owner("a/llama")
    for _ in range(10):
        got = router.pick(req("a", "llama"), replicas, None)
        assert got.index == team_owner
        router.on_done(got.index)


def test_different_keys_spread_over_replicas():
    """1000 keys reach every one of 8 replicas, none with a grossly oversized share."""
    router, replicas = affinity(8)
    owners = np.bincount([route_idle(router, replicas, f"key-{k}") for k in range(1000)],
                         minlength=8)
    assert (owners > 0).all()
    assert owners.max() < 2.5 * 1000 / 8, owners


def test_bounded_load_moves_a_key_off_an_overloaded_replica():
    """A hot key fills its owner up to the bound, then spills to the next replicas on
    the ring; no replica ever goes over ceil(c * total / n). When the owner drains
    the key comes back to it."""
    router, replicas = affinity(4, load_factor=1.25)
    owner = router.owner("hot")
    counts = [0] * 4
    picks = []
    for _ in range(40):
        bound = math.ceil(1.25 * (sum(counts) + 1) / 4)
        got = router.pick(key_req("hot"), replicas, None).index
        assert counts[got] < bound
        if counts[owner] < bound:
            assert got == owner               # affinity whenever the owner may take it
        counts[got] += 1
        picks.append(got)
    assert picks[0] == owner
    assert len(set(picks)) == 4 and max(counts) <= math.ceil(1.25 * 40 / 4), counts
    # the spill order is fixed by the ring, so a second router spills the same way
    again, again_replicas = affinity(4, load_factor=1.25)
    assert [again.pick(key_req("hot"), again_replicas, None).index
            for _ in range(40)] == picks
    for i, c in enumerate(counts):
        for _ in range(c):
            router.on_done(i)
    assert route_idle(router, replicas, "hot") == owner


def test_bounded_load_with_a_large_load_factor_is_pure_affinity():
    """With a load factor as large as the replica count the owner takes every request
    until it holds everything."""
    router, replicas = affinity(4, load_factor=4.0)
    owner = router.owner("k")
    assert {router.pick(key_req("k"), replicas, None).index for _ in range(30)} == {owner}


def test_affinity_respects_room_and_leave():
    """An owner without room passes the request on; no replica with room means no
    pick. A replica that left is never picked, and its requests ending later do not
    disturb the counts."""
    router, replicas = affinity(3)
    owner = router.owner("k")
    got = router.pick(key_req("k"), replicas, lambda r: r.index != owner)
    assert got.index != owner
    assert router.pick(key_req("k"), replicas, lambda r: False) is None
    router.on_leave(replicas[got.index])
    ready = [r for r in replicas if r.index != got.index]
    router.on_done(got.index)                      # e.g. lost to a preemption after leaving
    seen = {router.pick(key_req(f"x{k}"), ready, None).index for k in range(200)}
    assert seen <= {r.index for r in ready}
    assert router._total == sum(router._counts[r.index] for r in ready)


def owners_of(router, keys):
    return [router.owner(k) for k in keys]


def test_adding_or_removing_a_replica_remaps_few_keys():
    """Growing 8 replicas to 9 moves under 25 % of 1000 keys, all of them onto the
    new replica; removing a replica moves only the keys it owned."""
    keys = [f"group-{k}" for k in range(1000)]
    router, replicas = affinity(8)
    before = owners_of(router, keys)
    new = FakeReplica(8)
    router.on_ready(new)
    after = owners_of(router, keys)
    moved = [k for k, (a, b) in enumerate(zip(before, after)) if a != b]
    assert 0 < len(moved) < 250, len(moved)
    assert all(after[k] == 8 for k in moved)
    router.on_leave(new)
    assert owners_of(router, keys) == before
    router.on_leave(replicas[3])
    removed = owners_of(router, keys)
    for b, r in zip(before, removed):
        assert r == b if b != 3 else r != 3


OWNER_SCRIPT = """
from sim.routers.prefix_affinity import PrefixAffinityConfig, PrefixAffinityRouter
from types import SimpleNamespace
router = PrefixAffinityRouter(PrefixAffinityConfig())
for i in range(8):
    router.on_ready(SimpleNamespace(index=i))
print(*[router.owner(k) for k in ("team-a/llama-3.1-8b", "doc-1", "doc-2", "doc-3")])
"""


def test_ring_is_stable_across_processes():
    """Owners do not depend on PYTHONHASHSEED: processes with different hash seeds
    agree with this one."""
    router, _ = affinity(8)
    here = " ".join(str(router.owner(k))
                    for k in ("team-a/llama-3.1-8b", "doc-1", "doc-2", "doc-3"))
    for seed in ("1", "4242"):
        out = subprocess.run([sys.executable, "-c", OWNER_SCRIPT], cwd=ROOT, check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == here


# -- configuration and end to end --------------------------------------------------------
def test_router_configs_parse_and_are_registered():
    """Each new type parses through the RouterConfig union and maps to its router;
    bad parameters are refused."""
    adapter = TypeAdapter(RouterConfig)
    for data, cls in [({"type": "least_kv"}, LeastKvRouter),
                      ({"type": "power_of_two"}, PowerOfTwoRouter),
                      ({"type": "prefix_affinity", "virtual_nodes": 16,
                        "load_factor": 1.5}, PrefixAffinityRouter)]:
        cfg = adapter.validate_python(data)
        assert ROUTERS[type(cfg)] is cls
    cfg = adapter.validate_python({"type": "prefix_affinity"})
    assert (cfg.virtual_nodes, cfg.load_factor) == (64, 1.25)
    for bad in ({"type": "prefix_affinity", "load_factor": 0.5},
                {"type": "prefix_affinity", "virtual_nodes": 0},
                {"type": "least_kv", "extra": 1}):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


def scenario(router: dict, **pool) -> Scenario:
    return Scenario.model_validate({
        "name": "t", "seed": 5, "duration": 30, "drain": 600,
        "workload": {"streams": {
            "a": {"model": "llama-3.1-8b", "team": "a", "arrival": {"type": "poisson", "rate": 15},
                  "prompt_tokens": 400, "output_tokens": 100},
            "b": {"model": "llama-3.1-8b", "team": "b", "arrival": {"type": "poisson", "rate": 15},
                  "prompt_tokens": 400, "output_tokens": 100}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": 3,
                        "router": router, **pool}},
    })


@pytest.mark.parametrize("router", [{"type": "least_kv"}, {"type": "power_of_two"},
                                    {"type": "prefix_affinity"}])
@pytest.mark.parametrize("queue", [{}, {"queue": {"max_outstanding_per_replica": 4}}],
                         ids=["direct", "pool-queue"])
def test_each_router_serves_a_three_replica_pool(router, queue):
    """Every request completes and every replica serves some, with requests handed
    to replicas at once and with the pool holding them until a replica has room."""
    r = sim.run(scenario(router, **queue))
    req = r.requests
    assert len(req) > 500
    assert (req.status == "completed").all()
    assert set(req.replica.unique()) == {0, 1, 2}
    assert req.replica.value_counts().min() > 0.05 * len(req)


def test_power_of_two_runs_are_reproducible():
    """Two runs of one scenario with random routing give the same replica per request."""
    a = sim.run(scenario({"type": "power_of_two"})).requests
    b = sim.run(scenario({"type": "power_of_two"})).requests
    assert a.replica.tolist() == b.replica.tolist()
