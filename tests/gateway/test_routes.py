"""Routes: the first pool of each request, what follows when a pool is done with it, and
what a refusal takes back; and the rule that a stream naming its pool goes there."""
from __future__ import annotations

import numpy as np
import pytest

from simfactories import make_pool, make_request, make_scenario, poisson_stream
import sim
from sim.config.gateway import ServedModelConfig
from sim.gateway.routes import (CascadeRoute, DisaggregatedRoute, Escalate, HandOff,
                                LengthRoute, Route, WeightedRoute, build_route)


def served(**route) -> ServedModelConfig:
    return ServedModelConfig.model_validate(route)


def test_build_route_picks_the_kind_the_served_model_gives():
    assert type(build_route(None, "p")) is Route
    assert type(build_route(served(pools={"a": 1}), "p")) is Route
    assert isinstance(build_route(served(pools={"a": 1, "b": 3}), "p"), WeightedRoute)
    assert isinstance(build_route(served(cascade={"first": "a", "then": "b", "escalation": 0.5}), "p"),
                      CascadeRoute)
    assert isinstance(build_route(served(by_prompt_length={
        "threshold_tokens": 100, "short": "a", "long": "b"}), "p"), LengthRoute)
    assert isinstance(build_route(served(disaggregated={"prefill": "a", "decode": "b"}), "p"),
                      DisaggregatedRoute)


def test_weighted_route_splits_in_proportion():
    route, rng = build_route(served(pools={"a": 1, "b": 3}), "p"), np.random.default_rng(1)
    picks = [route.first_pool(make_request(), rng) for _ in range(20_000)]
    assert picks.count("b") / len(picks) == pytest.approx(0.75, abs=0.015)
    assert route.when_done(make_request(), rng) is None


def test_length_route_sends_the_threshold_itself_long():
    route = LengthRoute(100, "short", "long")
    rng = np.random.default_rng(0)
    assert [route.first_pool(make_request(prompt_tokens=n), rng) for n in (99, 100, 101)] \
        == ["short", "long", "long"]


def test_cascade_escalates_a_share_of_first_answers_only():
    route, rng = CascadeRoute("small", "large", 0.25), np.random.default_rng(2)
    req = make_request(pool="small")
    outcomes = [route.when_done(req, rng) for _ in range(20_000)]
    assert all(o in (None, Escalate("large")) for o in outcomes)
    assert sum(o is not None for o in outcomes) / len(outcomes) == pytest.approx(0.25, abs=0.015)
    assert route.when_done(make_request(pool="large"), rng) is None       # never twice


def test_disaggregated_route_hands_off_after_the_first_token_and_undoes_on_refusal():
    s = served(disaggregated={"prefill": "pre", "decode": "dec"})
    route, rng = build_route(s, "p"), np.random.default_rng(0)
    req = make_request(max_output_tokens=10)
    assert route.first_pool(req, rng) == "pre"
    assert req.max_output_tokens == 1 and req.handoff[:2] == ("dec", 10)
    req.num_output_tokens = 1
    assert route.when_done(req, rng) == HandOff("dec", s.disaggregated)
    route.undo(req)                                  # refused: the request as it came
    assert req.max_output_tokens == 10 and req.handoff is None
    assert route.when_done(req, rng) is None


def test_a_stream_that_names_its_pool_goes_there_whatever_the_models_route():
    """The served model lists pool `a` only; the stream says pool `b`: every request is
    served by `b` (the explicit pool wins, as the checks before the run assume)."""
    scenario = make_scenario(
        streams={"s": poisson_stream(rate=5, prompt_tokens=64, output_tokens=8) | {
            "model": "llama-3.1-8b", "pool": "b"}},
        pools={"a": make_pool(), "b": make_pool()}, duration=10,
        gateway={"models": {"llama-3.1-8b": {"pools": {"a": 1}}}})
    req = sim.run(scenario).requests
    assert len(req) > 20 and set(req["pool"]) == {"b"}
