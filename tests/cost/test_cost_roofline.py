"""Roofline cost model: step times against datasheet closed forms, and the
consistency of its vectorised, scalar and fast-forward entry points."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfactories import (decode_shape, hardware_spec, make_cost_model, model_spec,
                          prefill_shape)
from sim.cost.shape import BatchShape

ACTIVATION_BYTES = 2.0  # bf16 activations, as the roofline documents


def test_theory_decode_step_is_bound_by_reading_the_weights():
    """A batch-1 decode step with a short context takes about the time to read
    every weight once from HBM: at least weight_bytes / bandwidth (the roofline
    cannot beat the datasheet) and at most 1.6x that (efficiency + overhead)."""
    cost = make_cost_model(model="llama-3.1-8b", hardware="H100-SXM")
    floor_s = model_spec("llama-3.1-8b").weight_bytes("bf16") / hardware_spec().hbm_bandwidth
    ratio = float(cost.step_time_s(decode_shape(num_seqs=1, context_tokens=128))) / floor_s
    assert 1.0 <= ratio <= 1.6, ratio


def test_theory_long_prefill_is_bound_by_arithmetic():
    """An 8192-token prefill takes 1.0-1.8x of 2·params·tokens / peak FLOP/s."""
    cost = make_cost_model(model="llama-3.1-8b", hardware="H100-SXM")
    model = model_spec("llama-3.1-8b")
    tokens = 8192
    floor_s = 2.0 * model.total_params * tokens / hardware_spec().flops["bf16"]
    ratio = float(cost.step_time_s(prefill_shape(prompt_tokens=tokens))) / floor_s
    assert 1.0 <= ratio <= 1.8, ratio


def test_theory_fp8_weights_halve_the_bytes_of_the_memory_bound_part_of_decode():
    """Decode at batch 1 is memory bound. Less the fixed overhead and the kernels'
    fixed times, the step with fp8 weights takes the bf16 time scaled by the weight
    bytes, each read at its dtype's efficiency: the layers' weights halve and are read
    at quantized_weight_bandwidth_efficiency, the LM head stays in bf16 (as in
    published fp8 checkpoints)."""
    shape = decode_shape(num_seqs=1, context_tokens=128)
    bf16 = make_cost_model(weight_dtype="bf16")
    fp8 = make_cost_model(weight_dtype="fp8")
    t_bf16 = float(bf16.step_time_s(shape))
    t_fp8 = float(fp8.step_time_s(shape))
    assert t_fp8 < t_bf16
    cfg = bf16.cfg
    overhead = float(bf16.overhead_s(1.0))
    assert float(fp8.overhead_s(1.0)) == overhead
    m = model_spec("llama-3.1-8b")
    fixed = (overhead + m.num_layers * (4 * cfg.gemm_fixed_time + cfg.attention_decode_fixed_time)
             + cfg.gemm_fixed_time)
    ratio = (t_fp8 - fixed) / (t_bf16 - fixed)
    layers = m.num_layers * (m.attn_params_per_layer + m.mlp_params_per_layer)
    head = m.embedding_params                   # the LM head is read; the embedding is not
    e_bf16, e_fp8 = cfg.weight_bandwidth_efficiency, cfg.quantized_weight_bandwidth_efficiency
    expected = (layers * 1 / e_fp8 + head * 2 / e_bf16) / (layers * 2 / e_bf16 + head * 2 / e_bf16)
    assert ratio == pytest.approx(expected, rel=0.03)
    assert ratio > 0.5


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b"])
def test_weight_dtype_does_not_change_kv_or_overhead_terms(model):
    """Only weight-dependent terms move with the weight dtype: KV reads and
    per-step overhead are the same for bf16 and fp8 weights."""
    a = make_cost_model(model=model, tp=4 if "70b" in model else 1, weight_dtype="bf16")
    b = make_cost_model(model=model, tp=4 if "70b" in model else 1, weight_dtype="fp8")
    kv = np.array([0.0, 1e3, 1e5])
    np.testing.assert_allclose(a.attn_decode_s(kv), b.attn_decode_s(kv), rtol=1e-12)
    np.testing.assert_allclose(a.overhead_s(kv), b.overhead_s(kv), rtol=1e-12)


def test_tensor_parallel_splits_weights_and_adds_communication():
    """70B on H100 at tp=4 decodes faster than at tp=2; the per-layer weight read
    halves (memory bound; the GEMMs' fixed kernel time stays), and each tp>1 step pays
    a positive all-reduce term that tp=1 does not."""
    tp2 = make_cost_model(model="llama-3.1-70b", tp=2)
    tp4 = make_cost_model(model="llama-3.1-70b", tp=4)
    shape = decode_shape(num_seqs=1, context_tokens=512)
    assert float(tp4.step_time_s(shape)) < float(tp2.step_time_s(shape))
    fixed = 4 * tp2.cfg.gemm_fixed_time
    assert float(tp4.dense_s(1.0)) - fixed == pytest.approx(
        (float(tp2.dense_s(1.0)) - fixed) / 2, rel=0.01)
    assert float(tp2.tp_comm_s(1.0)) > 0 and float(tp4.tp_comm_s(1.0)) > 0
    assert float(tp2.tp_comm_s(4096.0)) > float(tp2.tp_comm_s(1.0))
    assert float(make_cost_model(tp=1).tp_comm_s(4096.0)) == 0.0


def test_batching_amortises_the_weight_read_of_a_dense_model():
    """For a dense model the dense term at 64 decode tokens costs about the same
    as at 1 (the weights are read once per step), so tokens per second grow
    almost linearly with the batch."""
    cost = make_cost_model()
    t1, t64 = float(cost.dense_s(1.0)), float(cost.dense_s(64.0))
    assert t64 >= t1
    assert t64 == pytest.approx(t1, rel=0.01)


def _weight_bytes_read_per_layer(cost, model, num_tokens: float) -> float:
    """Weight bytes one layer reads in a step of ``num_tokens`` (tp=1, no KV):
    the work counter minus activations and the LM head."""
    _, total = cost.work(BatchShape(num_tokens=num_tokens, num_seqs=1.0,
                                    prefill_attn_work=0.0, decode_kv_tokens=0.0))
    head = model.hidden_size * model.vocab_size * 2.0
    activations = 4.0 * num_tokens * model.hidden_size * ACTIVATION_BYTES
    return (float(total) - head) / model.num_layers - activations


@pytest.mark.parametrize("num_tokens", [1, 2, 16, 4096])
def test_theory_moe_weight_reads_follow_experts_touched(num_tokens):
    """Mixtral (8 experts, top 2): a step reads the attention weights plus the
    expected number of distinct experts hit, E·(1 − (1 − k/E)^n); 2 experts at
    one token, all 8 at 4096 tokens."""
    model = model_spec("mixtral-8x7b")
    cost = make_cost_model(model="mixtral-8x7b", hardware="H200", tp=1)
    e, k = model.num_experts, model.experts_per_token
    touched = e * (1 - (1 - k / e) ** num_tokens)
    expected = (model.attn_params_per_layer + touched * model.expert_params) * 2.0
    assert _weight_bytes_read_per_layer(cost, model, num_tokens) == pytest.approx(expected,
                                                                                 rel=1e-9)


def test_moe_reads_more_weights_at_large_batch_than_dense_does():
    """The MoE weight read grows with tokens (more experts touched) while a dense
    model's stays constant."""
    moe = model_spec("mixtral-8x7b")
    moe_cost = make_cost_model(model="mixtral-8x7b", hardware="H200")
    assert (_weight_bytes_read_per_layer(moe_cost, moe, 1)
            < _weight_bytes_read_per_layer(moe_cost, moe, 4096))
    assert float(moe_cost.dense_s(1.0)) < float(moe_cost.dense_s(64.0))
    dense = model_spec("llama-3.1-8b")
    dense_cost = make_cost_model()
    assert _weight_bytes_read_per_layer(dense_cost, dense, 1) == pytest.approx(
        _weight_bytes_read_per_layer(dense_cost, dense, 4096), rel=1e-9)


def _random_shapes(n: int, seed: int = 0) -> BatchShape:
    rng = np.random.default_rng(seed)
    num_seqs = rng.integers(1, 256, n).astype(np.float64)
    prefill_tokens = rng.integers(0, 4096, n).astype(np.float64)
    decode_ctx = rng.integers(0, 200_000, n).astype(np.float64)
    return BatchShape(num_tokens=num_seqs + prefill_tokens, num_seqs=num_seqs,
                      prefill_attn_work=BatchShape.prefill_work(prefill_tokens,
                                                                rng.integers(0, 8192, n)),
                      decode_kv_tokens=decode_ctx)


@pytest.mark.parametrize("kwargs", [
    {}, {"model": "llama-3.1-70b", "tp": 4}, {"model": "mixtral-8x7b", "hardware": "H200"},
    {"weight_dtype": "fp8", "kv_dtype": "fp8"},
])
def test_vectorised_step_equals_elementwise_scalar_steps(kwargs):
    """Evaluating many step shapes as arrays gives the same time, FLOPs and
    bytes as evaluating each shape on its own with scalars."""
    cost = make_cost_model(**kwargs)
    shapes = _random_shapes(50)
    vec = cost.step(shapes)
    for i in range(50):
        one = BatchShape(num_tokens=float(shapes.num_tokens[i]),
                         num_seqs=float(shapes.num_seqs[i]),
                         prefill_attn_work=float(shapes.prefill_attn_work[i]),
                         decode_kv_tokens=float(shapes.decode_kv_tokens[i]))
        s = cost.step(one)
        assert float(s.time_s) == pytest.approx(vec.time_s[i], rel=1e-12)
        assert float(s.flops) == pytest.approx(vec.flops[i], rel=1e-12)
        assert float(s.bytes) == pytest.approx(vec.bytes[i], rel=1e-12)


@pytest.mark.parametrize("num_seqs,kv_first,num_steps", [(1, 129, 1), (7, 3000, 50),
                                                          (256, 100_000, 400)])
def test_decode_run_equals_each_step_time(num_seqs, kv_first, num_steps):
    """``decode_run_s`` returns, for step i, the step time of a decode-only batch
    reading ``kv_first + i·num_seqs`` KV tokens."""
    cost = make_cost_model()
    run = cost.decode_run_s(num_seqs, kv_first, num_steps)
    assert run.shape == (num_steps,)
    for i in range(num_steps):
        one = float(cost.step_time_s(decode_shape(num_seqs=num_seqs,
                                                  context_tokens=kv_first + i * num_seqs)))
        assert run[i] == pytest.approx(one, rel=1e-12)
    assert np.all(np.diff(run) >= 0)


_sizes = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(base=st.tuples(st.integers(1, 512), _sizes, _sizes, _sizes),
       field=st.sampled_from(["num_tokens", "num_seqs", "prefill_attn_work",
                              "decode_kv_tokens"]),
       extra=st.floats(min_value=0.0, max_value=1e5, allow_nan=False))
def test_step_time_never_decreases_with_more_work(base, field, extra):
    """Adding tokens, sequences, prefill attention work or KV reads to a step
    never makes it faster, and every step costs at least the fixed overhead."""
    num_seqs, more_tokens, prefill, kv = base
    values = {"num_tokens": num_seqs + more_tokens, "num_seqs": float(num_seqs),
              "prefill_attn_work": prefill * 100, "decode_kv_tokens": kv}
    cost = make_cost_model()
    before = float(cost.step_time_s(BatchShape(**values)))
    values[field] += extra
    if field == "num_seqs":
        values["num_tokens"] += extra  # every sequence brings at least one token
    after = float(cost.step_time_s(BatchShape(**values)))
    assert after >= before
    assert before >= cost.cfg.step_overhead


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("num_seqs,kv_first,num_steps", [(1, 129, 3), (7, 3000, 50),
                                                          (256, 100_000, 400)])
def test_decode_run_closed_form_equals_each_steps_scalar_cost(model, num_seqs, kv_first,
                                                              num_steps):
    """The roofline's fast-forward line (cost at no KV, kept per batch size, plus the exact
    cost per KV token) gives each step's time, FLOPs and bytes as ``step_scalar`` does."""
    cost = make_cost_model(model=model, tp=2)
    for _ in range(2):                       # the second run reads the kept line
        run = cost.decode_run(num_seqs, float(kv_first), num_steps)
        prev = 0.0
        for i in range(num_steps):
            t, f, b = cost.step_scalar(float(num_seqs), float(num_seqs), 0.0,
                                       float(kv_first + i * num_seqs))
            assert run.step_end_s[i] - prev == pytest.approx(t, rel=1e-9)
            assert run.flops_first + run.flops_slope * i == pytest.approx(f, rel=1e-12)
            assert run.bytes_first + run.bytes_slope * i == pytest.approx(b, rel=1e-12)
            prev = run.step_end_s[i]


@settings(max_examples=300, deadline=None)
@given(first=st.floats(1e-5, 1.0), slope=st.sampled_from([0.0, 1e-9, 1e-6, 1e-4]),
       n=st.integers(1, 3000), where=st.floats(-0.1, 1.2), at_an_end=st.booleans())
def test_linear_step_ends_count_before_equals_a_search_of_the_ends(first, slope, n, where,
                                                                   at_an_end):
    """The closed-form count of ends before a time equals bisecting the materialised ends,
    at and between ends, inclusive or not."""
    from bisect import bisect_left, bisect_right
    from sim.cost.steps import LinearStepEnds
    ends = LinearStepEnds(first, slope, n)
    listed = [ends[i] for i in range(n)]
    x = listed[min(int(abs(where) * n), n - 1)] if at_an_end else where * listed[-1]
    assert ends.count_before(x, inclusive=True) == bisect_right(listed, x)
    assert ends.count_before(x, inclusive=False) == bisect_left(listed, x)


@pytest.mark.parametrize("kwargs", [
    {}, {"model": "llama-3.1-70b", "tp": 4}, {"model": "mixtral-8x7b", "hardware": "H200"},
    {"model": "mixtral-8x7b", "tp": 8, "weight_dtype": "fp8"},
    {"weight_dtype": "fp8", "kv_dtype": "fp8"}, {"model": "llama-3.1-70b", "tp": 2},
])
def test_scalar_step_equals_the_vectorised_step_to_the_bit(kwargs):
    """``step_scalar`` (the simulator's hot path, its terms in plain floats) gives the
    very bits of the array evaluation (both add their terms with ``step_sum``), for
    prefill, decode, mixed and empty steps, dense and mixture-of-experts, TP 1 to 8."""
    cost = make_cost_model(**kwargs)
    shapes = _random_shapes(200, seed=3)
    zero = np.arange(200) % 7 == 0           # steps with no prefill, no KV read, or neither
    shapes = BatchShape(num_tokens=shapes.num_tokens, num_seqs=shapes.num_seqs,
                        prefill_attn_work=np.where(zero, 0.0, shapes.prefill_attn_work),
                        decode_kv_tokens=np.where(np.arange(200) % 5 == 0, 0.0,
                                                  shapes.decode_kv_tokens))
    vec = cost.step(shapes)
    for i in range(200):
        t, f, b = cost.step_scalar(float(shapes.num_tokens[i]), float(shapes.num_seqs[i]),
                                   float(shapes.prefill_attn_work[i]),
                                   float(shapes.decode_kv_tokens[i]))
        assert (t, f, b) == (vec.time_s[i], vec.flops[i], vec.bytes[i]), i


@pytest.mark.parametrize("kwargs", [
    {}, {"model": "mixtral-8x7b", "hardware": "H200"}, {"model": "llama-3.1-70b", "tp": 4},
    {"weight_dtype": "fp8", "kv_dtype": "fp8"},
])
def test_work_scalar_gives_the_bits_of_step_scalars_flops_and_bytes(kwargs):
    """``work_scalar`` (a measured cost model's work counters, without the roofline's
    seconds) is ``step_scalar``'s FLOPs and bytes to the bit, dense and mixture-of-experts,
    with and without prefill or keys read."""
    cost = make_cost_model(**kwargs)
    shapes = _random_shapes(200, seed=5)
    for i in range(200):
        args = (float(shapes.num_tokens[i]), float(shapes.num_seqs[i]),
                0.0 if i % 7 == 0 else float(shapes.prefill_attn_work[i]),
                0.0 if i % 5 == 0 else float(shapes.decode_kv_tokens[i]))
        assert cost.work_scalar(*args) == cost.step_scalar(*args)[1:], i
