"""GPU memory as the hardware has it, and KV blocks as vLLM's memory planner counts them.

vLLM logs its planner's arithmetic at start-up ("the current vLLM instance can use
total_gpu_memory (79.11GiB) x gpu_memory_utilization (0.90) = 71.20GiB; model weights
take 14.99GiB; non_torch_memory takes 0.35GiB; PyTorch activation peak memory takes
1.24GiB; the rest of the memory reserved for KV Cache is 54.62GiB", Llama-3.1-8B in bf16
on one 80 GB H100). fleetsim's planner is the same sum: the driver's total
(``reported_memory``) times ``gpu_memory_utilization``, less the weights per GPU and
``activation_reserve`` (non-torch plus activation peak), in blocks of
``block_size`` tokens x the KV bytes per token per GPU. The numbers below are worked
out by hand in the comments.
"""
from __future__ import annotations

import pytest

from simfactories import hardware_spec, make_pool, make_scenario, model_spec
from sim.config.specs import ModelSpec
from sim.config.resolve import resolve
from sim.cost.memory import kv_budget

GIB = 2 ** 30


def blocks(model, hardware, *, tp=1, weight_dtype="bf16", kv_dtype="bf16", reserve=2e9,
           util=0.9, block=16, kv_cache_bytes=None) -> int:
    m = model if isinstance(model, ModelSpec) else model_spec(model)
    return kv_budget(m, hardware_spec(hardware), tp=tp, weight_dtype=weight_dtype,
                     kv_dtype=kv_dtype, block_size_tokens=block, gpu_memory_utilization=util,
                     activation_reserve_bytes=reserve, kv_cache_bytes=kv_cache_bytes).num_blocks


# -- memory in the maker's units --------------------------------------------------------------
@pytest.mark.parametrize("name, gib, reported_gib", [
    # HBM capacities are binary: an "80 GB" H100 or A100 is 80 GiB = 85.9e9 bytes, and
    # CUDA reports a little less as its total (vLLM's total_gpu_memory)
    ("H100-SXM", 80, 79.11), ("A100-80GB", 80, 79.15), ("H200", 141, 139.81),
    ("B200", 180, 178.4), ("MI300X", 192, 191.45),
    # GDDR6 with ECC: 48 GiB on the box, 44.39 GiB reported
    ("L40S", 48, 44.39),
])
def test_gpu_memory_is_binary_and_the_reported_total_sits_just_under_it(name, gib,
                                                                        reported_gib):
    hw = hardware_spec(name)
    assert hw.memory == gib * GIB
    assert hw.reported_memory == pytest.approx(reported_gib * GIB, rel=1e-9)
    assert hw.planning_memory == hw.reported_memory
    # what engines see is within 8% of the capacity, never above it
    assert 0.92 * hw.memory <= hw.reported_memory <= hw.memory


def test_reported_memory_above_the_capacity_is_refused():
    data = hardware_spec("H100-SXM").model_dump()
    data["reported_memory"] = 81 * GIB
    with pytest.raises(ValueError, match=r"reported_memory \(81.00 GiB\) exceeds memory "
                                         r"\(80.00 GiB\)"):
        type(hardware_spec("H100-SXM")).model_validate(data)


# -- weights as published checkpoints hold them -------------------------------------------------
def test_quantised_weights_keep_the_embedding_and_lm_head_in_bf16():
    """Llama-3.1-8B: 8.03e9 parameters, of which the embedding and the LM head are
    2 x 128,256 x 4,096 = 1.05e9. bf16: 16.06e9 bytes = 14.96 GiB (vLLM: "model weights
    take 14.99GiB"). FP8 checkpoints quantise the rest: 6.98e9 x 1 + 1.05e9 x 2 = 9.08e9
    bytes = 8.46 GiB (vLLM loads Llama-3.1-8B-Instruct-FP8 in 8.49 GiB)."""
    m = model_spec("llama-3.1-8b")
    assert m.edge_params == 2 * 128_256 * 4_096
    assert m.weight_bytes("bf16") / GIB == pytest.approx(14.957, abs=1e-3)
    assert m.weight_bytes("fp8") / GIB == pytest.approx(8.457, abs=1e-3)
    assert m.weight_bytes("fp8") / GIB == pytest.approx(8.49, rel=0.01)     # vLLM's log
    assert m.weight_bytes("int4") == pytest.approx((m.total_params - m.edge_params) * 0.5
                                                   + m.edge_params * 2.0)
    assert m.weight_bytes("fp32") == 2 * m.weight_bytes("bf16")


# -- KV blocks against vLLM's planner --------------------------------------------------------------
def test_llama_8b_on_one_h100_has_the_blocks_vllms_planner_gives():
    """vLLM: 79.11 x 0.90 = 71.20 GiB; − 14.99 weights − 0.35 non-torch − 1.24 activation
    = 54.62 GiB of KV; at 128 KiB per token (2 x 32 layers x 8 KV heads x 128 x 2 bytes)
    that is 447,447 tokens, 27,965 blocks of 16.
    fleetsim, with the reserve vLLM measured (0.35 + 1.24 = 1.59 GiB):
    (71.199 − 14.957 − 1.59) GiB = 54.652 GiB = 27,981 blocks of 2 MiB."""
    got = blocks("llama-3.1-8b", "H100-SXM", reserve=1.59 * GIB)
    assert got == 27_981
    assert got == pytest.approx(27_965, rel=0.002)


def test_llama_70b_tp4_on_h100_blocks_worked_out():
    """Per GPU: 79.11 GiB x 0.9 = 71.199 GiB; weights 131.414 / 4 = 32.854 GiB; reserve
    2e9 B = 1.863 GiB; left 36.483 GiB = 39,173,150,335 B; a block is 16 x 327,680 / 4 =
    1,310,720 B: 29,886 blocks (478,176 tokens)."""
    assert blocks("llama-3.1-70b", "H100-SXM", tp=4) == 29_886


def test_a_70b_at_tp2_on_a100_has_thousands_of_blocks_not_hundreds():
    """Llama-2-70B (68.98e9 parameters, 137.95e9 bytes in bf16 = 128.48 GiB) at TP 2 on
    80 GiB A100s: 79.15 x 0.9 = 71.235 GiB − 64.24 GiB of weights − 1.863 GiB reserve =
    5.134 GiB per GPU, in blocks of 16 x 327,680 / 2 = 2,621,440 B: 2,102 blocks. With
    memory read as 80e9 bytes it had 390 (a TTFT of minutes for a light load)."""
    llama2 = ModelSpec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64,
                       num_kv_heads=8, head_dim=128, ffn_size=28672, vocab_size=32000,
                       max_model_len=4096)
    assert llama2.total_params == 68_975_329_280
    assert blocks(llama2, "A100-80GB", tp=2) == 2_102


def test_fp8_weights_and_kv_on_h200_blocks_worked_out():
    """Llama-3.1-70B in fp8 at TP 2 on H200: 139.81 x 0.9 = 125.829 GiB; weights
    67.664 / 2 = 33.832 GiB; reserve 1.863 GiB; left 90.134 GiB; a block in fp8 KV is
    16 x 163,840 / 2 = 1,310,720 B: 73,838 blocks."""
    assert blocks("llama-3.1-70b", "H200", tp=2, weight_dtype="fp8", kv_dtype="fp8") == 73_838


# -- the error when nothing fits ---------------------------------------------------------------------
def _problems(**pool):
    _, problems = resolve(make_scenario(pool=make_pool(**pool)))
    return problems


def test_weights_that_do_not_fit_name_tp_and_a_larger_tp_that_fits():
    (loc, msg), = _problems(model="llama-3.1-70b", tp=1)
    assert loc[-1] == "tp"
    assert "131.4 GiB of weights" in msg and "79.1 GiB each" in msg
    assert msg.endswith("it fits at tp=2")


def test_the_hint_never_suggests_the_tp_the_pool_has():
    """405B in bf16 (756 GiB) fits no H100 node: the error says so instead of suggesting
    tp=8 to a pool that already has tp: 8."""
    (loc, msg), = _problems(model="llama-3.1-405b", tp=8)
    assert loc[-1] == "tp"
    assert "tp=8)" in msg and "fits at tp=8" not in msg
    assert "no tp up to the 8 GPUs of one H100-SXM node leaves room" in msg
    assert "weight_dtype fp8 or int4" in msg


def test_a_kv_cache_that_does_not_fit_beside_weights_that_do_names_kv_cache_bytes():
    (loc, msg), = _problems(model="llama-3.1-8b", kv_cache_bytes="60GiB")
    assert loc[-1] == "kv_cache_bytes"
    assert "kv_cache_bytes 60.00 GiB per GPU does not fit" in msg
    assert "at most 54.38 GiB is left" in msg          # 71.199 − 14.957 − 1.863
    assert "fits at tp" not in msg


def test_a_reserve_that_leaves_less_than_a_block_names_activation_reserve():
    (loc, msg), = _problems(model="llama-3.1-8b", activation_reserve="56.241GiB")
    assert loc[-1] == "activation_reserve"
    assert "less than one block" in msg


# -- a speculative decoding draft model sits beside its target --------------------------------
def test_a_draft_model_takes_its_weights_and_its_kv_from_the_cache():
    """Llama-3.1-8B with a Llama-3.2-1B draft (bf16, one H100): vLLM loads both models and
    gives every KV block room for both models' keys and values of its tokens."""
    target = model_spec("llama-3.1-8b")
    draft = ModelSpec(name="llama-3.2-1b", num_layers=16, hidden_size=2048, num_heads=32,
                      num_kv_heads=8, head_dim=64, ffn_size=8192, vocab_size=128256,
                      tied_embeddings=True)
    hw = hardware_spec("H100-SXM")
    args = dict(tp=1, weight_dtype="bf16", kv_dtype="bf16", block_size_tokens=16,
                gpu_memory_utilization=0.9, activation_reserve_bytes=2e9, kv_cache_bytes=None)
    alone = kv_budget(target, hw, **args)
    both = kv_budget(target, hw, draft=draft, **args)
    free = hw.planning_memory * 0.9 - target.weight_bytes("bf16") - 2e9
    # worked out: the draft's 1.24e9 parameters take 2.47 GB; its 16 layers x 8 KV heads
    # x 64 x 2 (K, V) x 2 bytes = 32 KiB a token beside the target's 128 KiB
    assert draft.total_params == 1_235_746_816
    assert draft.kv_bytes_per_token("bf16") == 16 * 8 * 64 * 2 * 2
    assert both.weight_bytes_per_gpu == pytest.approx(
        target.weight_bytes("bf16") + draft.weight_bytes("bf16"))
    assert both.kv_bytes_per_token == target.kv_bytes_per_token("bf16") + 32768
    assert both.num_blocks == int((free - draft.weight_bytes("bf16")) // (16 * (131072 + 32768)))
    assert alone.num_blocks == int(free // (16 * 131072))
    assert both.num_blocks < 0.8 * alone.num_blocks
