"""Disaggregated prefill/decode against colocated serving at equal GPU count."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sim
from sim.config.scenario import Scenario
from tests.simfactories import make_pool

ROOT = Path(__file__).resolve().parents[2]


def run(model: str):
    base = sim.load_scenario(ROOT / "scenarios" / "disaggregated.yaml")
    data = base.model_dump()
    for stream in data["workload"]["streams"].values():
        stream["model"] = model
    return sim.run(Scenario.model_validate(data))


def gap_p99(res) -> float:
    req = res.requests
    chat = req[(req.stream == "chat") & (req.status == "completed")]
    return float(np.percentile(chat.max_itl_s.dropna(), 99))


def test_decode_no_longer_stalls_behind_long_prompts():
    """With 16k-token documents arriving, colocated replicas stall chat decodes
    for whole prefills; split pools keep the longest token gap short."""
    split, colocated = run("chat-split"), run("chat-colocated")
    assert gap_p99(colocated) > 0.3
    assert gap_p99(split) < gap_p99(colocated) / 5
    assert (split.requests.status == "completed").all()


def test_kv_transfer_time_is_accounted():
    """Each request's KV crosses the link in latency + bytes / bandwidth, and
    the client sees it: the gap after the first token covers the transfer."""
    res = run("chat-split")
    req = res.requests[res.requests.status == "completed"]
    expected = 0.002 + req.prompt_tokens * 131072 / 25e9
    np.testing.assert_allclose(req.kv_transfer_s, expected, rtol=1e-12)
    many = req[req.output_tokens > 1]
    assert (many.max_itl_s >= many.kv_transfer_s).all()
    assert (req.pool == "decode").all()


def test_each_pool_computes_its_phase_only():
    """The prefill pool computes the prompts; the decode pool the other output
    tokens, and one more for each request it decoded (the default engine, vLLM with
    async scheduling, keeps a finished request for one extra step)."""
    res = run("chat-split")
    req = res.requests
    pools = res.summary["pools"]
    assert pools["prefill"]["tokens_computed"] == pytest.approx(
        (req.prompt_tokens - req.cached_prompt_tokens).sum(), rel=1e-12)
    assert pools["decode"]["tokens_computed"] == pytest.approx(
        (req.output_tokens - 1 + (req.output_tokens > 1)).sum(), rel=1e-12)


def test_prefix_cache_hits_are_reported_on_the_pool_that_computed_the_prompt():
    """A disaggregated request's row names its decode pool, but its prompt (and so its
    prefix-cache hits) was computed on the prefill pool: prefix_hit_rate is that pool's."""
    scenario = Scenario.model_validate({
        "seed": 1, "duration": 20.0,
        "workload": {"streams": {"chat": {
            "team": "a", "model": "split", "arrival": {"type": "poisson", "rate": 2.0},
            "prefix": {"tokens": 2000}, "prompt_tokens": 200, "output_tokens": 20}}},
        "gateway": {"models": {"split": {"disaggregated": {"prefill": "pre",
                                                           "decode": "dec"}}}},
        "pools": {"pre": make_pool(prefix_caching=True, replicas=1),
                  "dec": make_pool(prefix_caching=True, replicas=1)}})
    res = sim.run(scenario)
    done = res.requests[res.requests["status"] == "completed"]
    assert len(done) > 20 and (done["pool"].astype(str) == "dec").all()
    expected = done["cached_prompt_tokens"].sum() / done["prompt_tokens"].sum()
    assert expected > 0.5
    pools = res.summary["pools"]
    assert pools["pre"]["prefix_hit_rate"] == pytest.approx(expected)
    assert pools["dec"]["prefix_hit_rate"] == 0.0
