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


# -- cost: each pool's bill is shared by the work done there --------------------------------

def _work(rows) -> float:
    return float((rows["prompt_tokens"] - rows["cached_prompt_tokens"]
                  + rows["output_tokens"]).sum())


def test_a_disaggregated_prefill_pools_cost_reaches_the_teams():
    """Every request computed its prompt on the prefill pool: that pool's bill is the
    requests' (nothing left unattributed), shared by the prompts they computed there."""
    scenario = make_scenario(
        streams={"s": poisson_stream(rate=4, prompt_tokens=500, output_tokens=20) | {
            "model": "split"}},
        pools={"pre": make_pool(), "dec": make_pool()}, duration=20,
        gateway={"models": {"split": {"disaggregated": {"prefill": "pre", "decode": "dec"}}}})
    res = sim.run(scenario)
    done = res.requests[res.requests["status"] == "completed"]
    assert len(done) > 30 and set(done["pool"]) == {"dec"}
    total = res.summary["cost"]["total_usd"]
    assert res.requests["cost_usd"].sum() == pytest.approx(total, rel=1e-9)
    assert res.summary["cost"]["unattributed_usd"] == pytest.approx(0.0, abs=1e-12)


def test_a_cascades_first_attempts_are_paid_by_their_own_team():
    """Team beta sends straight to the small pool, team alpha's cascade tries it first and
    escalates 90% to the large one: beta pays the small pool's bill in proportion to its
    own work there, not to the share of requests that ended there."""
    out = 20
    scenario = make_scenario(
        streams={"a": poisson_stream(rate=4, prompt_tokens=500, output_tokens=out) | {
                     "team": "alpha", "model": "auto"},
                 "b": poisson_stream(rate=1, prompt_tokens=500, output_tokens=out) | {
                     "team": "beta", "pool": "small"}},
        pools={"small": make_pool(), "large": make_pool()}, duration=30,
        gateway={"models": {"auto": {"cascade": {"first": "small", "then": "large",
                                                 "escalation": 0.9}}}})
    res = sim.run(scenario)
    req = res.requests[res.requests["status"] == "completed"]
    alpha, beta = req[req["team"] == "alpha"], req[req["team"] == "beta"]
    escalated = alpha[alpha["pool"] == "large"]
    assert len(escalated) > 50 and len(beta) > 10
    # an escalated request computed its whole prompt and answer on the small pool first
    alpha_on_small = _work(alpha[alpha["pool"] == "small"]) + \
        float((escalated["prompt_tokens"] + out).sum())
    small_usd = res.summary["pools"]["small"]["cost_usd"]
    expected = small_usd * _work(beta) / (_work(beta) + alpha_on_small)
    assert res.summary["teams"]["beta"]["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert res.requests["cost_usd"].sum() == pytest.approx(res.summary["cost"]["total_usd"],
                                                           rel=1e-9)


def test_an_escalated_request_cut_off_has_no_finish_of_its_first_attempt():
    """A cascade's second attempt still running when the run ends: unfinished, with no
    finish time (its first attempt's end is not its own), so no negative TPOT."""
    scenario = make_scenario(
        streams={"a": poisson_stream(rate=40, prompt_tokens=500, output_tokens=200) | {
            "model": "auto"}},
        pools={"small": make_pool(), "large": make_pool()}, duration=10, drain=0,
        gateway={"models": {"auto": {"cascade": {"first": "small", "then": "large",
                                                 "escalation": 0.9}}}})
    req = sim.run(scenario).requests
    cut = req[(req["status"] == "unfinished") & (req["attempts"] == 2)]
    assert len(cut) > 0 and cut["finish_s"].isna().all()
    assert not (req["tpot_s"] < 0).any() and not (req["e2e_s"] < 0).any()
