"""The longest-cached-prefix router: where a replica's cache holds most of the prompt,
within bounded loads, and what that does to a run of multi-turn sessions."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

import sim
from simfactories import FakeReplica, make_pool, make_request, make_scenario, uniform
from sim.routers.longest_prefix import LongestPrefixConfig, LongestPrefixRouter


def router(replicas, **cfg) -> LongestPrefixRouter:
    r = LongestPrefixRouter(LongestPrefixConfig(**cfg))
    for rep in replicas:
        r.on_ready(rep)
    return r


def test_the_replica_holding_the_longest_prefix_wins_and_ties_go_to_the_least_loaded():
    reps = [FakeReplica(0, cached_tokens=32), FakeReplica(1, cached_tokens=96),
            FakeReplica(2, cached_tokens=64)]
    r = router(reps, load_factor=1000.0)
    assert r.pick(make_request(prompt_tokens=200), reps, None).index == 1
    # no replica holds any of it: the one with fewest routed requests (1 has one now)
    cold = [FakeReplica(i) for i in range(3)]
    r = router(cold)
    picks = [r.pick(make_request(prompt_tokens=200), cold, None).index for _ in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_a_replica_at_the_load_bound_is_passed_over_for_a_shorter_match():
    reps = [FakeReplica(0, cached_tokens=160), FakeReplica(1, cached_tokens=16),
            FakeReplica(2)]
    r = router(reps, load_factor=1.0)
    picks = [r.pick(make_request(prompt_tokens=200), reps, None).index for _ in range(3)]
    # bound = ceil((routed + 1) / 3): 0 takes the first, then must wait for the others
    assert picks == [0, 1, 2]
    r.on_done(1)
    r.on_done(2)
    assert r.pick(make_request(prompt_tokens=200), reps, None).index == 1


def test_a_match_below_the_minimum_share_counts_as_none():
    reps = [FakeReplica(0), FakeReplica(1, cached_tokens=40)]
    r = router(reps, load_factor=1000.0, min_cached_fraction=0.5)
    r._counts[0] = 0
    r._counts[1] = 3                       # busier: only a real match would send it there
    r._total = 3
    assert r.pick(make_request(prompt_tokens=100), reps, None).index == 0
    assert r.pick(make_request(prompt_tokens=60), reps, None).index == 1


def test_only_replicas_with_room_are_picked_and_none_when_none_has():
    reps = [FakeReplica(0, cached_tokens=100), FakeReplica(1)]
    r = router(reps)
    assert r.pick(make_request(prompt_tokens=200), reps, lambda rep: rep.index == 1).index == 1
    assert r.pick(make_request(prompt_tokens=200), reps, lambda rep: False) is None


def test_a_shared_system_prompt_without_a_load_bound_draws_every_request_to_one_replica():
    """What the load bound is for: every first turn matches the system prompt cached on
    the first replica to serve one, so with load_factor 1000 all go there; with the
    default bound they spread."""
    def run(load_factor):
        stream = {"arrival": {"type": "poisson", "rate": 1.0}, "prompt_tokens": 100,
                  "output_tokens": 50, "prefix": {"tokens": 256}}
        pool = make_pool(prefix_caching=True, replicas=4)
        pool["router"] = {"type": "longest_prefix", "load_factor": load_factor}
        return sim.run(make_scenario(stream=stream, pools={"p": pool}, duration=60.0))
    assert run(1000.0).requests["replica"].nunique() == 1
    assert run(1.25).requests["replica"].nunique() > 1


@pytest.mark.parametrize("field,value", [("load_factor", 0.5), ("min_cached_fraction", 1.5),
                                         ("load_factor", float("nan"))])
def test_out_of_range_settings_are_refused(field, value):
    with pytest.raises(ValidationError):
        LongestPrefixConfig(**{field: value})


def _sessions(router_type: str):
    stream = {"arrival": {"type": "poisson", "rate": 1.0},
              "prompt_tokens": uniform(50, 300), "output_tokens": uniform(20, 200),
              "sessions": {"turns": uniform(2, 6), "think_time": "3s",
                           "think_time_distribution": "fixed"}}
    pool = make_pool(prefix_caching=True, replicas=4)
    pool["router"] = {"type": router_type}
    if router_type == "longest_prefix":
        pool["router"]["load_factor"] = 1000.0
    return sim.run(make_scenario(stream=stream, pools={"p": pool}, duration=300.0, seed=2))


def test_each_turn_follows_its_conversation_to_the_replica_that_caches_it():
    """With caches that never evict and no load bound, every later turn of a conversation
    is served where its first turn was (only that replica holds the conversation), first
    turns (no system prompt: nothing cached anywhere) go by load, and more of the prompts
    come from the cache than under least_outstanding."""
    res = _sessions("longest_prefix")
    req = res.requests
    assert (req["status"].astype(str) == "completed").all()
    assert req["turn"].max() > 2
    replicas_per_conversation = req.groupby("session")["replica"].nunique()
    assert (replicas_per_conversation == 1).all()
    assert req["replica"].nunique() == 4              # first turns still spread by load
    spread = _sessions("least_outstanding").summary["pools"]["p"]["prefix_hit_rate"]
    assert res.summary["pools"]["p"]["prefix_hit_rate"] > spread
