"""Pipeline parallelism (``pp``): stage layout, memory per stage and step times against
the equations of ``sim/cost/pipeline.py``'s docstring; a replica's GPUs and their cost."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import sim
from simfactories import (hardware_spec, make_cost_model, make_pool, make_scenario,
                          model_spec, poisson_stream)

from sim.config.resolve import resolve
from sim.cost import build_cost_model
from sim.cost.memory import kv_budget, stage_weight_bytes_per_gpu
from sim.cost.pipeline import PipelineCostModel, num_nodes, stage_layers
from sim.cost.roofline import FITTED
from sim.cost.shape import BatchShape
from sim.core.fleet import draft_cost_model

GIB = 2 ** 30
EFFICIENCY = FITTED["interconnect_efficiency"]


def _budget(model: str, tp: int, pp: int, hardware: str = "H100-SXM"):
    return kv_budget(model_spec(model), hardware_spec(hardware), tp=tp, pp=pp,
                     weight_dtype="bf16", kv_dtype="bf16", block_size_tokens=16,
                     gpu_memory_utilization=0.9, activation_reserve_bytes=2e9,
                     kv_cache_bytes=None)


def _pool(**cfg):
    resolved, problems = resolve(make_scenario(pool=make_pool(**cfg)))
    assert problems == [], problems
    return resolved.pools["p"]


# -- layout ------------------------------------------------------------------------------
@pytest.mark.parametrize("layers, pp, expected", [
    (126, 2, [63, 63]), (126, 4, [31, 32, 32, 31]), (10, 4, [2, 3, 3, 2]),
    (80, 3, [27, 27, 26]), (32, 1, [32]), (5, 5, [1, 1, 1, 1, 1])])
def test_layers_split_as_vllm_splits_them(layers, pp, expected):
    """⌊L/pp⌋ each, the remainder one each to the stages before the last, nearest it
    first (vLLM's get_pp_indices)."""
    assert stage_layers(layers, pp) == expected and sum(expected) == layers


def test_stages_fill_a_node_before_the_next():
    assert num_nodes(tp=8, pp=2, gpus_per_node=8) == 2
    assert num_nodes(tp=4, pp=2, gpus_per_node=8) == 1
    assert num_nodes(tp=2, pp=8, gpus_per_node=8) == 2
    assert num_nodes(tp=1, pp=3, gpus_per_node=8) == 1


# -- memory --------------------------------------------------------------------------------
def test_405b_in_bf16_fits_two_h100_nodes_in_two_stages_not_one_node():
    """756 GiB of weights: 94.5 GiB a GPU at tp=8 (71.2 GiB usable: no room), 47 GiB a
    GPU at tp=8, pp=2."""
    assert _budget("llama-3.1-405b", tp=8, pp=1).num_blocks == 0
    assert _budget("llama-3.1-405b", tp=8, pp=2).num_blocks > 0
    _, problems = resolve(make_scenario(
        stream=poisson_stream(model="llama-3.1-405b"),
        pool=make_pool(model="llama-3.1-405b", tp=8)))
    (loc, msg), = problems
    assert loc == ("pools", "p", "tp") and "leaves no room for a KV cache" in msg
    assert "pp=2 at tp=8 leaves room (16 GPUs a replica)" in msg
    assert _pool(model="llama-3.1-405b", tp=8, pp=2).gpus_per_replica == 16


def test_theory_blocks_of_405b_over_two_stages():
    """Each stage: 63 of 126 layers and one of the embedding / LM head, over 8 GPUs;
    free = 79.11 GiB · 0.9 − weights − 2 GB; a block = 16 · 516,096 · 63/126 / 8 bytes."""
    model = model_spec("llama-3.1-405b")
    layers_bytes, edges_bytes = model.weight_bytes_split("bf16")
    per_gpu = (layers_bytes / 2 + edges_bytes / 2) / 8
    assert stage_weight_bytes_per_gpu(model, "bf16", 8, 2) == [per_gpu, per_gpu]
    free = 79.11 * GIB * 0.9 - per_gpu - 2e9
    block = 16 * 516_096 * 63 / 126 / 8
    budget = _budget("llama-3.1-405b", tp=8, pp=2)
    assert budget.num_blocks == math.floor(free / block) == 45_956
    assert budget.weight_bytes_per_gpu == per_gpu


def test_the_tightest_stage_sets_the_blocks():
    """80 layers over 3 stages (27, 27, 26): the first, with the embedding and a layer
    more than the last, has the least room, and its blocks are the replica's."""
    model = model_spec("llama-3.1-70b")
    weights = stage_weight_bytes_per_gpu(model, "bf16", 2, 3)
    assert weights[0] > weights[2] and weights[0] == max(weights)
    kv_per_token = model.kv_bytes_per_token("bf16")
    each = [math.floor((79.11 * GIB * 0.9 - w - 2e9) / (16 * kv_per_token * layers / 80 / 2))
            for w, layers in zip(weights, stage_layers(80, 3))]
    assert _budget("llama-3.1-70b", tp=2, pp=3).num_blocks == min(each)


def test_one_stage_is_the_budget_as_it_was():
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mixtral-8x7b", 2)):
        m = model_spec(model)
        assert m.weight_bytes("bf16") == sum(m.weight_bytes_split("bf16"))
        assert _budget(model, tp, 1) == kv_budget(
            m, hardware_spec(), tp=tp, weight_dtype="bf16", kv_dtype="bf16",
            block_size_tokens=16, gpu_memory_utilization=0.9, activation_reserve_bytes=2e9,
            kv_cache_bytes=None)


# -- step time -------------------------------------------------------------------------------
def test_one_stage_builds_the_cost_model_itself():
    """pp = 1: no wrapper; the step times are today's, bit for bit."""
    pool = _pool(model="llama-3.1-70b", tp=4)
    cost = build_cost_model(pool)
    assert not isinstance(cost, PipelineCostModel)
    plain = make_cost_model(model="llama-3.1-70b", tp=4)
    for args in ((1.0, 1.0, 0.0, 500.0), (64.0, 64.0, 0.0, 64 * 900.0),
                 (2048.0, 1.0, 2048 * 1024.0, 0.0)):
        assert cost.step_scalar(*args) == plain.step_scalar(*args)


def _closed_form(inner, model, tp, layers, sends, n, m, work=0.0, kv=0.0):
    """The docstring's equations, term by term from the inner model."""
    micro = min(len(layers), max(1, int(m)))
    whole = inner.step_scalar(n / micro, m / micro, work / micro, kv / micro)[0]
    host = inner.overhead_s(m / micro)
    head = float(inner.lm_head_s(m / micro))
    per_layer = (whole - host - head) / model.num_layers
    send_bytes = 2 * (n / micro) * model.hidden_size * 2 / tp
    x = [latency + send_bytes / bandwidth for latency, bandwidth in sends]
    stage = [layers[s] * per_layer + (x[s] if s < len(x) else head)
             for s in range(len(layers))]
    return max(whole + sum(x), micro * max(host, *stage))


def test_theory_step_of_two_stages_in_one_node():
    """Llama-3.1-70B, tp=4, pp=2 on one H100 node: the send is over NVLink (the
    all-reduce's two-GPU latency, half of 900 GB/s at the fitted efficiency)."""
    pool = _pool(model="llama-3.1-70b", tp=4, pp=2)
    cost = build_cost_model(pool)
    inner = make_cost_model(model="llama-3.1-70b", tp=4)
    model, hw = model_spec("llama-3.1-70b"), hardware_spec()
    nvlink = [(hw.allreduce_latency, 900e9 / 2 * EFFICIENCY)]
    for n, m, work, kv in ((1, 1, 0, 2000), (64, 64, 0, 64 * 1500), (3, 3, 0, 3000),
                           (1024, 1, 1024 * 512, 0), (600, 9, 512 * 256, 8 * 700)):
        expected = _closed_form(inner, model, 4, [40, 40], nvlink, n, m, work, kv)
        assert cost.step_scalar(n, m, work, kv)[0] == pytest.approx(expected, rel=1e-12)


def test_theory_step_of_two_stages_on_two_nodes():
    """Llama-3.1-405B, tp=8, pp=2 on H100: the stages sit on two nodes and the send goes
    over 400 Gb/s InfiniBand (50 GB/s a GPU, 10 us) at the hardware's internode_efficiency
    (1 by default), not at the NVLink all-reduce's fitted efficiency."""
    pool = _pool(model="llama-3.1-405b", tp=8, pp=2)
    cost = build_cost_model(pool)
    inner = make_cost_model(model="llama-3.1-405b", tp=8)
    model = model_spec("llama-3.1-405b")
    network = [(10e-6, 50e9)]
    for n, m, kv in ((1, 1, 4000), (128, 128, 128 * 2000)):
        expected = _closed_form(inner, model, 8, [63, 63], network, n, m, kv=kv)
        assert cost.step_scalar(n, m, 0.0, kv)[0] == pytest.approx(expected, rel=1e-12)


def test_the_network_send_moves_at_the_hardware_internode_efficiency():
    """A send between nodes takes internode_latency + bytes / (internode_bandwidth x
    internode_efficiency); a send within a node is untouched by internode_efficiency."""
    model, hw = model_spec("llama-3.1-405b"), hardware_spec()
    inner = make_cost_model(model="llama-3.1-405b", tp=8)
    per_token = 2 * model.hidden_size * 2 / 8
    for efficiency in (1.0, 0.8, 0.5):
        derated = hw.model_copy(update={"internode_efficiency": efficiency})
        across = PipelineCostModel(inner, model, derated, tp=8, pp=2)
        assert across.send_latency_s == [hw.internode_latency]
        assert across.send_s_per_token[0] == pytest.approx(
            per_token / (50e9 * efficiency), rel=1e-12)
        within = PipelineCostModel(make_cost_model(model="llama-3.1-405b", tp=4), model,
                                   derated, tp=4, pp=2)
        assert within.send_s_per_token[0] == pytest.approx(
            2 * model.hidden_size * 2 / 4 / (900e9 / 2 * EFFICIENCY), rel=1e-12)


def test_a_lone_request_pays_the_whole_traversal_and_stages_buy_memory_not_speed():
    """One sequence (M = 1): every layer plus the send, the other stage idle (the bubble).
    Many (M = pp): no period is shorter than one micro-batch's traversal of every layer,
    and tp=8 steps faster than tp=4 x pp=2 on the same 8 GPUs (it splits the weight
    reads; stages read theirs once a micro-batch)."""
    cost = build_cost_model(_pool(model="llama-3.1-70b", tp=4, pp=2))
    inner = make_cost_model(model="llama-3.1-70b", tp=4)
    hw = hardware_spec()
    send = hw.allreduce_latency + 2 * 8192 * 2 / 4 / (900e9 / 2 * EFFICIENCY)
    assert cost.step_scalar(1, 1, 0, 1000)[0] == pytest.approx(
        inner.step_scalar(1, 1, 0, 1000)[0] + send, rel=1e-12)
    period = cost.step_scalar(64, 64, 0, 64 * 1000)[0]
    assert period >= inner.step_scalar(32, 32, 0, 32 * 1000)[0] + send
    wide = make_cost_model(model="llama-3.1-70b", tp=8)
    assert wide.step_scalar(64, 64, 0, 64 * 1000)[0] < 0.8 * period


def test_vectorised_and_scalar_steps_agree():
    cost = build_cost_model(_pool(model="llama-3.1-70b", tp=2, pp=3))
    n = np.array([1.0, 7.0, 64.0, 900.0])
    m = np.array([1.0, 7.0, 64.0, 3.0])
    work = np.array([0.0, 0.0, 0.0, 800 * 400.0])
    kv = np.array([300.0, 7 * 800.0, 64 * 1200.0, 2 * 500.0])
    shape = BatchShape(n, m, work, kv)
    times = cost.step_time_s(shape)
    flops, moved = cost.work(shape)
    for i in range(len(n)):
        t, f, b = cost.step_scalar(n[i], m[i], work[i], kv[i])
        assert t == pytest.approx(times[i], rel=1e-12)
        assert (f, b) == pytest.approx((flops[i], moved[i]), rel=1e-12)


def test_a_micro_batch_reads_every_stages_weights_once():
    """Bytes moved in a full pipeline: M micro-batches each read the weights; FLOPs are
    the batch's whatever the split."""
    cost = build_cost_model(_pool(model="llama-3.1-70b", tp=4, pp=2))
    inner = make_cost_model(model="llama-3.1-70b", tp=4)
    _, f2, b2 = cost.step_scalar(64, 64, 0, 64 * 1000)
    _, f1, b1 = inner.step_scalar(64, 64, 0, 64 * 1000)
    assert f2 == pytest.approx(f1, rel=1e-12)
    weights = model_spec("llama-3.1-70b").weight_bytes("bf16")
    assert b2 - b1 == pytest.approx(weights, rel=0.05)


def test_fast_forward_equals_exact_steps_over_stages():
    """The pipeline's decode steps are not linear in the keys read (a maximum of two
    lines): fast-forwarding them still gives each request the times of stepping."""
    runs = []
    for exact in (False, True):
        runs.append(sim.run(make_scenario(
            stream=poisson_stream(model="llama-3.1-70b", rate=4.0, prompt_tokens=600,
                                  output_tokens={"type": "uniform", "low": 20, "high": 200}),
            pool=make_pool(model="llama-3.1-70b", tp=4, pp=2,
                           scheduler={"type": "continuous", "exact_steps": exact}),
            duration=20.0)).requests)
    a, b = runs
    assert len(a) == len(b) > 0
    pd.testing.assert_series_equal(a["status"], b["status"])
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9, atol=0, err_msg=col)


# -- GPUs and their cost -------------------------------------------------------------------------
def test_two_stages_bill_twice_the_gpus():
    """The same fleet at pp=2 holds 2 x tp GPUs a replica: GPU-hours over the run and the
    cost per hour double."""
    per_h = {}
    for pp in (1, 2):
        res = sim.run(make_scenario(pool=make_pool(tp=2, pp=pp, replicas=3), duration=10.0))
        pool = res.summary["pools"]["p"]
        per_h[pp] = (pool["gpu_hours"] * 3600 / res.summary["end_s"],
                     pool["cost_usd"] * 3600 / res.summary["end_s"])
        assert pool["replicas_mean"] == pytest.approx(3.0)
    assert per_h[1][0] == pytest.approx(6.0) and per_h[2][0] == pytest.approx(12.0)
    assert per_h[2][1] == pytest.approx(2 * per_h[1][1])


def test_stages_across_nodes_need_a_network_figure():
    """A GPU profile without internode_bandwidth keeps a replica in one node."""
    hw = hardware_spec("L40S").model_dump()
    assert hw["internode_bandwidth"] is None
    _, problems = resolve(make_scenario(pool=make_pool(hardware="L40S", tp=8, pp=2)))
    (loc, msg), = problems
    assert loc == ("pools", "p", "pp") and "span 2 nodes" in msg
    linked = dict(hw, name="L40S-IB", internode_bandwidth="25GB/s")
    resolved, problems = resolve(make_scenario(pool=make_pool(hardware="L40S-IB", tp=8, pp=2),
                                               hardware={"L40S-IB": linked}))
    assert problems == [] and resolved.pools["p"].gpus_per_replica == 16
    cost = build_cost_model(resolved.pools["p"])
    assert cost.send_latency_s == [10e-6]
    assert cost.send_s_per_token == [2 * 4096 * 2 / 8 / 25e9]


def test_more_stages_than_layers_is_refused():
    _, problems = resolve(make_scenario(pool=make_pool(pp=33)))
    (loc, msg), = problems
    assert loc == ("pools", "p", "pp") and "exceeds llama-3.1-8b's 32 layers" in msg


def test_a_draft_model_shares_the_stages():
    """Speculative decoding at pp=2: the draft model's steps run over the same stages."""
    pool = _pool(model="llama-3.1-70b", tp=4, pp=2,
                 scheduler={"type": "speculative", "proposer": "draft_model",
                            "draft_model": "llama-3.1-8b", "num_speculative_tokens": 3,
                            "acceptance_rate": 0.7})
    draft = draft_cost_model(pool)
    assert isinstance(draft, PipelineCostModel) and draft.pp == 2
    assert draft.layers_per_stage == [16, 16]


def test_a_verify_pass_is_one_micro_batch_not_one_a_draft():
    """Speculative decoding: a sequence with 4 drafts is 5 logit rows but one sequence;
    its verify pass is one micro-batch (M = 1: the whole traversal, the weights read
    once), not min(pp, 5) = 4 slices of it. The rows still count for the LM head and the
    per-row overhead."""
    cost = build_cost_model(_pool(model="llama-3.1-70b", tp=4, pp=4))
    inner = make_cost_model(model="llama-3.1-70b", tp=4)
    model, hw = model_spec("llama-3.1-70b"), hardware_spec()
    work, kv = BatchShape.prefill_work(4, 2001.0), 2001.0
    t, f, b = cost.step_scalar(5, 5.0, work, kv, sequences=1.0)
    whole, f1, b1 = inner.step_scalar(5, 5.0, work, kv)
    # two stages a node: NVLink, the network, NVLink; 5 tokens' hidden states and residual
    per_gpu = 2 * 5 * model.hidden_size * 2 / 4
    nvlink = hw.allreduce_latency + per_gpu / (900e9 / 2 * EFFICIENCY)
    sends = 2 * nvlink + 10e-6 + per_gpu / 50e9
    assert t == pytest.approx(whole + sends, rel=1e-12)
    assert (f, b) == (f1, b1)
    # without the sequence count the rows are taken for sequences, as before
    assert cost.step_scalar(5, 5.0, work, kv)[2] > 3.5 * b1


def test_the_speculative_scheduler_counts_micro_batches_in_sequences(monkeypatch):
    """The speculative scheduler gives the target model its sequences besides its rows:
    every call's sequences is at most its rows, fewer where drafts were verified."""
    calls = []
    original = PipelineCostModel.step_scalar

    def spy(self, num_tokens, num_seqs, work, kv, kv_read=None, sequences=None):
        calls.append((num_seqs, sequences))
        return original(self, num_tokens, num_seqs, work, kv, kv_read, sequences=sequences)

    monkeypatch.setattr(PipelineCostModel, "step_scalar", spy)
    sim.run(make_scenario(
        stream=poisson_stream(model="llama-3.1-70b", rate=2.0, prompt_tokens=200,
                              output_tokens=30),
        pool=make_pool(model="llama-3.1-70b", tp=4, pp=2,
                       scheduler={"type": "speculative", "proposer": "ngram",
                                  "num_speculative_tokens": 3, "acceptance_rate": 0.7}),
        duration=5.0))
    given = [(rows, seqs) for rows, seqs in calls if seqs is not None]
    assert given and all(seqs <= rows for rows, seqs in given)
    assert any(seqs < rows for rows, seqs in given)


def _calibrated_pipeline():
    from sim.config import profiles
    from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
    model = profiles.find_model("tiny-llama", {})
    hw = profiles.find_hardware("cpu", {}).model_copy(
        update={"internode_bandwidth": 10e9, "max_gpus_per_node": 8})
    inner = CalibratedCostModel(model, hw, 1, "fp32", "fp32", CalibratedConfig(
        profile="profiles/calibrated/cpu/intel-xeon/validation/profile/"
                "validate-light-engine.yaml"))
    return model, inner, PipelineCostModel(inner, model, hw, 1, 2)


def test_a_calibrated_engines_per_key_kernel_is_stage_work_not_host_work():
    """A calibrated engine's per-key term (an attention kernel over the packed batch) is
    GPU work spread over the stages' layers; only its per-prefill-step seconds are host
    work once a micro-batch. 8 sequences of 4,000 keys on two stages: the period is the
    traversal of one half (the host's 8 ms does not bind), not 2 x (overhead + the
    packed attention of a half)."""
    model, inner, cost = _calibrated_pipeline()
    for n, m, work, kv in ((8, 8, 0.0, 8 * 4000.0), (1, 1, 0.0, 300.0),
                           (520, 5, 512 * 256.0, 4 * 900.0)):
        micro = min(2, int(m))
        share = BatchShape(n / micro, m / micro, work / micro, kv / micro)
        whole = inner.step_scalar(n / micro, m / micro, work / micro, kv / micro)[0]
        host = float(inner.overhead_s(m / micro)) + (0.006419 if work > 0 else 0.0)
        assert float(inner.engine_host_s(share)) + float(inner.overhead_s(m / micro)) == \
            pytest.approx(host, rel=1e-12)
        head = float(inner.lm_head_s(m / micro))
        expected = cost.period_s(whole, host, head, n / micro, float(micro))
        assert cost.step_scalar(n, m, work, kv)[0] == pytest.approx(expected, rel=1e-12)
        times = cost.step_time_s(BatchShape(np.array([n], float), np.array([m], float),
                                            np.array([work]), np.array([kv])))
        assert times[0] == pytest.approx(expected, rel=1e-12)
    t1 = inner.step_scalar(8, 8, 0.0, 8 * 4000.0)[0]
    period = cost.step_scalar(8, 8, 0.0, 8 * 4000.0)[0]
    assert period < 0.5 * t1 + 0.02                  # about half the pp = 1 step, plus a send
    packed = float(inner.engine_s(BatchShape(4.0, 4.0, 0.0, 4 * 4000.0)))
    assert packed > 0.1 and period < 2 * packed      # not 2 x the kernel as host work


def test_theory_the_busiest_stage_sets_the_period_on_a_slow_network():
    """Two stages of Llama-3.1-8B (tp=8) on two L40S nodes joined at 0.5 GB/s, a 4,096-token
    prefill of two sequences (M = 2, 2,048 tokens each): the send of a micro-batch's
    hidden states (2 x 2,048 x 4,096 x 2 / 8 bytes a GPU, about 8 ms) is longer than the
    host's work and the LM head, so a stage's 16 layers plus its send, twice a period,
    outlasts one micro-batch's traversal: step = 2 (16 y + x), not T1 + x."""
    hw = dict(hardware_spec("L40S").model_dump(), name="L40S-IB", internode_bandwidth="0.5GB/s")
    resolved, problems = resolve(make_scenario(pool=make_pool(hardware="L40S-IB", tp=8, pp=2),
                                               hardware={"L40S-IB": hw}))
    assert problems == []
    cost = build_cost_model(resolved.pools["p"])
    inner = cost.inner
    n, m, work = 4096.0, 2.0, 2 * BatchShape.prefill_work(2048, 0.0)
    whole = inner.step_scalar(n / 2, m / 2, work / 2, 0.0)[0]
    host, head = float(inner.overhead_s(1.0)), float(inner.lm_head_s(1.0))
    y = (whole - host - head) / 32
    x = 10e-6 + 2 * 2048 * 4096 * 2 / 8 / 0.5e9
    assert x > host + head                           # the condition for the bound to bind
    traversal, busiest = whole + x, 2 * (16 * y + x)
    assert busiest > 1.03 * traversal
    assert cost.step_scalar(n, m, work, 0.0)[0] == pytest.approx(busiest, rel=1e-12)


def test_theory_the_busiest_of_uneven_stages_sets_the_period():
    """Llama-3.1-8B's 32 layers on five stages of one H100 each: 6, 6, 7, 7, 6 layers
    (the last with the LM head). Five 2,048-token prompts fill M = 5 micro-batches; a
    7-layer stage with its send, five times a period, outlasts one prompt's traversal
    (32 layers, four sends, the host and the head once): 35 y + 5 x > 32 y + 4 x + h + d
    when 3 y + x > h + d, as a layer of a 2,048-token chunk (about a millisecond) is."""
    cost = build_cost_model(_pool(model="llama-3.1-8b", tp=1, pp=5))
    assert cost.layers_per_stage == [6, 6, 7, 7, 6]
    inner = make_cost_model(model="llama-3.1-8b", tp=1)
    hw = hardware_spec()
    n, m, work = 5 * 2048.0, 5.0, 5 * BatchShape.prefill_work(2048, 0.0)
    whole = inner.step_scalar(2048.0, 1.0, work / 5, 0.0)[0]
    host, head = float(inner.overhead_s(1.0)), float(inner.lm_head_s(1.0))
    y = (whole - host - head) / 32
    x = hw.allreduce_latency + 2 * 2048 * 4096 * 2 / (900e9 / 2 * EFFICIENCY)
    stages = [6 * y + x, 6 * y + x, 7 * y + x, 7 * y + x, 6 * y + head]
    traversal = whole + 4 * x
    assert max(stages) == 7 * y + x > host
    busiest = 5 * (7 * y + x)
    assert busiest > 1.05 * traversal
    assert cost.step_scalar(n, m, work, 0.0)[0] == pytest.approx(busiest, rel=1e-12)
