"""Prefix caching: shared system prompts are computed once and reused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.config.scenario import Scenario
from sim.entities.kv import KvCacheManager
from sim.cost import build_cost_model
from sim.cost.engine_host import with_engine_host
from sim.entities.request import Request

ROOT = Path(__file__).resolve().parents[2]


def scenario(on: bool, rate: float) -> Scenario:
    base = sim.load_scenario(ROOT / "scenarios" / "prefix-caching.yaml")
    data = base.model_dump()
    data["pools"]["main"]["prefix_caching"] = on
    data["pools"]["main"]["front_end"] = 0      # TTFT here is the engine's prefill alone
    data["workload"]["streams"]["assistant"]["arrival"]["rate"] = {"type": "constant",
                                                                    "value": rate}
    return Scenario.model_validate(data)


def request(rid: int, group: str | None, prompt: int, prefix: int = 0) -> Request:
    req = Request(rid, 0, "t", "m", "p", 0, 0.0, prompt, 10)
    req.prefix_group, req.prefix_tokens = group, prefix
    return req


def test_hit_rate_is_the_cached_share_of_prompt_tokens():
    """Every request after the first reuses the 2,000-token prefix's full
    blocks: the pool's hit rate is that share of all prompt tokens."""
    r = sim.run(scenario(True, 5.0))
    req = r.requests[r.requests.status == "completed"]
    full_blocks = 2000 // 16 * 16
    expected = full_blocks * (len(req) - 1) / req.prompt_tokens.sum()
    assert r.summary["pools"]["main"]["prefix_hit_rate"] == pytest.approx(expected, rel=0.01)
    assert req.cached_prompt_tokens.iloc[0] == 0
    assert (req.cached_prompt_tokens.iloc[1:] == full_blocks).mean() > 0.99


def test_ttft_falls_as_the_cost_model_predicts_for_the_uncached_part():
    """At light load TTFT is one prefill step: of the whole prompt without the
    cache, of the uncached tail (attending over the cached context) with it."""
    on, off = sim.run(scenario(True, 1.0)), sim.run(scenario(False, 1.0))
    spec = next(iter(sim.api._resolve_or_raise(scenario(True, 1.0), None, None).pools.values()))
    cost = with_engine_host(build_cost_model(spec), spec.engine)    # the pool's step

    def predicted(row) -> float:
        cached, prompt = row.cached_prompt_tokens, row.prompt_tokens
        new = prompt - cached
        return cost.step_scalar(new, 1, new * (cached + new / 2.0), 0.0)[0]

    for res in (on, off):
        req = res.requests[(res.requests.status == "completed") & (res.requests.queue_s == 0)]
        ratio = req.ttft_s.mean() / np.mean([predicted(r) for r in req.itertuples()])
        assert 0.999 <= ratio < 1.25       # a decode batch may share the step
    assert on.summary["latency_s"]["ttft"]["mean"] < 0.3 * off.summary["latency_s"]["ttft"]["mean"]


def test_caching_raises_saturated_throughput_and_cuts_computed_tokens():
    """At 40 requests/s the uncached pool saturates; the cached one keeps up.
    GPU tokens computed equal prompt + output tokens minus the cached ones, and one
    token more for each request that decoded (the default engine, vLLM with async
    scheduling, keeps a finished request for one extra step)."""
    on, off = sim.run(scenario(True, 40.0)), sim.run(scenario(False, 40.0))
    assert on.summary["throughput"]["requests_per_s"] > 2.0 * off.summary["throughput"][
        "requests_per_s"]
    for res in (sim.run(scenario(True, 5.0)), sim.run(scenario(False, 5.0))):
        req = res.requests
        assert (req.preemptions == 0).all()
        expected = (req.prompt_tokens - req.cached_prompt_tokens + req.output_tokens - 1
                    + (req.output_tokens > 1)).sum()
        computed = res.summary["pools"]["main"]["tokens_computed"]
        assert computed == pytest.approx(expected, rel=1e-12)


def test_groups_never_share_blocks():
    """Two prefix groups build separate chains; a request only hits its own."""
    kv = KvCacheManager(100, 16, prefix_caching=True)
    a, b = request(1, "a", 100, 64), request(2, "b", 100, 64)
    for req in (a, b):
        assert kv.hit_blocks(req) == 0
        assert kv.allocate(req, 100)
        req.num_computed_tokens = 100
        kv.register_prefix(req)
        assert req.prefix_blocks == 4 and req.num_blocks == 3
    assert kv.num_used_blocks == 14
    a2, c = request(3, "a", 50, 64), request(4, "c", 100, 64)
    assert kv.hit_blocks(a2) == 3            # 49 tokens usable: 3 full blocks
    assert kv.hit_blocks(c) == 0
    kv.free(a)
    kv.free(b)
    assert kv.num_cached_blocks == 8 and kv.num_free_blocks == 100


def test_eviction_takes_tails_of_the_least_recently_used_group_first():
    """When never-used blocks run out, cached blocks go tail-first, oldest group first."""
    kv = KvCacheManager(12, 16, prefix_caching=True)
    for rid, group in ((1, "old"), (2, "new")):
        req = request(rid, group, 80, 64)
        assert kv.allocate(req, 80)
        req.num_computed_tokens = 80
        kv.register_prefix(req)
        kv.free(req)
    assert kv.num_cached_blocks == 8 and kv.num_free_blocks == 12
    hog = request(9, None, 16 * 6)
    assert kv.allocate(hog, 16 * 6)           # 4 never-used + 2 evicted
    assert kv.hit_blocks(request(10, "old", 200, 64)) == 2
    assert kv.hit_blocks(request(11, "new", 200, 64)) == 4


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["admit", "finish"]), st.integers(0, 2),
                              st.integers(1, 300)), max_size=60))
def test_block_accounting_with_sharing_is_conserved(ops):
    """free + used = total, cached <= free, and refcounts match the holders,
    through any sequence of admissions (with hits) and completions."""
    kv = KvCacheManager(40, 16, prefix_caching=True)
    live: list[Request] = []
    for i, (op, g, prompt) in enumerate(ops):
        if op == "admit":
            req = request(i, f"g{g}", prompt + 1, 64)
            hit = kv.hit_blocks(req)
            own = -(-(req.prompt_tokens) // 16) - hit
            if hit and own + kv.pinned_by(req, hit) > kv.num_free_blocks:
                continue
            if hit:
                kv.acquire_prefix(req, hit)
                req.num_computed_tokens = hit * 16
            if not kv.allocate(req, req.prompt_tokens - req.num_computed_tokens):
                if req.prefix_blocks:
                    kv.release_prefix(req)
                continue
            req.num_computed_tokens = req.prompt_tokens
            kv.register_prefix(req)
            live.append(req)
        elif live:
            kv.free(live.pop(prompt % len(live)))
        held = sum(r.num_blocks for r in live)
        shared = sum(sum(1 for c in chain if c > 0) for chain in kv._chains.values())
        assert kv.num_used_blocks == held + shared
        assert 0 <= kv.num_cached_blocks <= kv.num_free_blocks <= kv.num_blocks
        for group, chain in kv._chains.items():
            holders = [r for r in live if r.prefix_group == group]
            for idx, count in enumerate(chain):
                assert count == sum(1 for r in holders if r.prefix_blocks > idx)


# -- a preempted request's own blocks ---------------------------------------------------
def preempted(kv: KvCacheManager, req: Request, computed: int) -> Request:
    """``req`` computed ``computed`` tokens (its prompt and one sampled token), then
    preempted by the scheduler."""
    assert kv.allocate(req, computed - req.num_computed_tokens)
    req.num_computed_tokens = computed
    kv.register_prefix(req)
    req.num_output_tokens = 1
    kv.preempt(req)
    req.num_computed_tokens = 0
    return req


def test_a_preempted_request_starts_again_from_its_own_cached_blocks():
    """As in vLLM with prefix caching on: the blocks a preempted request gives back stay
    cached (free, evictable), and re-admitted it recomputes only its partial last block."""
    kv = KvCacheManager(20, 16, prefix_caching=True)
    req = preempted(kv, request(1, None, 100), 100)          # 7 blocks, 6 of them full
    assert kv.num_free_blocks == 20 and kv.num_cached_blocks == 6
    assert kv.hit_blocks(req) == 6
    assert kv.admit(req, 6, 101 - 96) == (96, 0)      # 96 tokens cached, none shared
    assert req.num_blocks == 7
    assert kv.num_free_blocks == 13 and kv.num_cached_blocks == 0


def test_without_prefix_caching_a_preempted_request_recomputes_everything():
    kv = KvCacheManager(20, 16, prefix_caching=False)
    req = preempted(kv, request(1, None, 100), 100)
    assert kv.num_cached_blocks == 0 and kv.hit_blocks(req) == 0


def test_a_preempted_requests_blocks_are_evicted_tail_first():
    kv = KvCacheManager(20, 16, prefix_caching=True)
    req = preempted(kv, request(1, None, 100), 100)
    other = request(2, None, 16 * 16)
    assert kv.allocate(other, 16 * 16)                       # 14 never-used + 2 evicted
    assert kv.hit_blocks(req) == 4 and kv.num_cached_blocks == 4


def test_own_blocks_are_usable_only_behind_the_whole_shared_prefix():
    """A preempted request of a prefix group hits the group's chain, then its own
    blocks; once a block of the chain before them is evicted, only the chain counts."""
    kv = KvCacheManager(20, 16, prefix_caching=True)
    req = preempted(kv, request(1, "g", 100, 64), 100)       # 4 shared + 2 own full blocks
    assert kv.num_cached_blocks == 6 and kv.hit_blocks(req) == 6
    assert kv.pinned_by(req, 6) == 6
    other = request(2, None, 15 * 16)
    assert kv.allocate(other, 15 * 16)    # 14 never-used + the group's tail (least recent)
    assert kv.hit_blocks(req) == 3


def test_cached_work_of_preempted_requests_cuts_recomputation():
    """A small cache under heavy load preempts often; with prefix caching on the
    engine recomputes well under half the tokens it recomputes without."""
    def run(on: bool):
        return sim.run(Scenario.model_validate({
            "name": "preempt", "seed": 3, "duration": 20,
            "workload": {"streams": {"chat": {
                "model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": 20},
                "prompt_tokens": {"type": "lognormal", "mean": 600, "cv": 0.8, "max": 4000},
                "output_tokens": {"type": "lognormal", "mean": 400, "cv": 0.8,
                                  "max": 2000}}}},
            "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": 1,
                            "prefix_caching": on, "kv_cache_bytes": "1GB",
                            "scheduler": {"type": "continuous"}}}}))

    extra = {}
    for on in (True, False):
        res = run(on)
        req = res.requests
        assert (req.status == "completed").all() and req.preemptions.sum() > 50
        needed = (req.prompt_tokens + req.output_tokens - 1).sum()
        extra[on] = res.summary["pools"]["p"]["tokens_computed"] - needed
        assert extra[on] > 0
    assert extra[True] < 0.6 * extra[False]
