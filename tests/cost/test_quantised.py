"""Quantised tiers: fp8 weights and KV against bf16 on the same GPUs."""
from __future__ import annotations

from pathlib import Path

import pytest

import sim
from sim.config import profiles
from sim.config.scenario import Scenario
from sim.cost import measured
from sim.cost.measured import AutoConfig

ROOT = Path(__file__).resolve().parents[2]


def load(**stream_rates) -> Scenario:
    base = sim.load_scenario(ROOT / "scenarios" / "quantised-tiers.yaml")
    data = base.model_dump()
    for name, rate in stream_rates.items():
        data["workload"]["streams"][name]["arrival"]["rate"] = {"type": "constant",
                                                                "value": rate}
    return Scenario.model_validate(data)


def test_fp8_has_more_kv_blocks_in_the_proportion_memory_predicts():
    """Blocks = (139.81 GiB reported·0.9 − weights/tp − 2 GB) / (16 · KV bytes/token / tp):
    fp8 halves the layers' weights (the embedding and LM head stay bf16) and the KV bytes
    per token."""
    r = sim.run(load())
    model = profiles.find_model("llama-3.1-70b")
    edge = model.edge_params * 2                                 # bf16 in both
    layers = model.total_params - model.edge_params
    free = lambda wbytes: (139.81 * 2 ** 30 * 0.9  # noqa: E731
                           - (layers * wbytes + edge) / 2 - 2e9)
    per_block = lambda kvbytes: 16 * 2 * 80 * 8 * 128 * kvbytes / 2  # noqa: E731
    pools = r.summary["pools"]
    assert pools["bf16"]["kv_blocks_per_replica"] == int(free(2) // per_block(2))
    assert pools["fp8"]["kv_blocks_per_replica"] == int(free(1) // per_block(1))
    assert pools["fp8"]["kv_blocks_per_replica"] > 2 * pools["bf16"]["kv_blocks_per_replica"]


def test_fp8_decodes_faster_by_the_cost_models_ratio():
    """At light load TPOT is one decode step: fp8's is shorter than bf16's by
    the ratio of their step times, here from the shipped profiles of kernels measured
    on H200 (each pool runs on its own: 70B at TP 2 in bf16, and in fp8 with fp8 KV)."""
    r = sim.run(load(**{"product-chat": 0.05, "analytics": 0.05}))
    assert {p["cost_model"] for p in r.summary["pools"].values()} == {
        "calibrated profiles/calibrated/gpu/h200/vllm/llama-3.1-70b-tp2-bf16.yaml",
        "calibrated profiles/calibrated/gpu/h200/vllm/llama-3.1-70b-tp2-fp8-kvfp8.yaml"}
    req = r.requests[r.requests.status == "completed"]
    tpot = req.groupby("pool", observed=True).tpot_s.median()
    model, hw = profiles.find_model("llama-3.1-70b"), profiles.find_hardware("H200")
    step = {d: measured.build(model, hw, 2, d, d, AutoConfig()).step_scalar(
        1, 1, 0, 1200)[0] for d in ("bf16", "fp8")}
    assert tpot["fp8"] / tpot["bf16"] == pytest.approx(step["fp8"] / step["bf16"], rel=0.03)
    # fp8 GEMMs at half the weight bytes, less the FP8 activation scales vLLM computes
    # each step (about 3% of the GEMMs' time): 0.71 of bf16's step here
    assert tpot["fp8"] < 0.75 * tpot["bf16"]


def test_the_cheap_tier_is_offered_to_some_teams_only():
    """A team outside the fp8 variant's list is refused it (403-like)."""
    data = load().model_dump()
    data["workload"]["streams"]["analytics"]["team"] = "product"
    r = sim.run(Scenario.model_validate(data))
    refused = r.requests[r.requests.stream == "analytics"]
    assert (refused.reject_reason == "model_not_allowed").all()
