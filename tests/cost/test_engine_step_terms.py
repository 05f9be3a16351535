"""What an engine adds to the kernels of a measured-kernel profile: vLLM's FP8 activation
scales computed each step, and TensorRT-LLM's host time run beside the GPU.

The database is ``test_kernel_profiles``'s fixture (GEMMs, attention, all-reduces whose
latencies follow known formulas) with a quantize table laid out as AIConfigurator's
(``<gpu>/quantize/<engine>/<version>/computescale_perf.parquet``, latencies in ms) and the
same kernels filed under TensorRT-LLM; the shipped TensorRT-LLM profile is checked on the
decode step of the 128-in / 2,048-out validation row.
"""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from calibrate.kernels import from_kernels
from calibrate.fitting.shapes import ShardShape
from sim.config import profiles
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from test_kernel_profiles import TINY, _write, gemm_ms, write_db

K_GRID = [256, 512, 1024, 2048]
M_GRID = [1, 16, 256, 4096]


def scale_ms(m, k):
    """A scale per token over a fixed one: a launch, then in proportion to the elements."""
    return 0.0006 + 2e-9 * m * k


@pytest.fixture
def db(tmp_path):
    root = write_db(tmp_path / "data")
    rows = [dict(op_name="compute_scale", m=m, k=k, quant_dtype="fp8",
                 latency=scale_ms(m, k), kernel_source="dynamic_minus_static")
            for k in K_GRID for m in M_GRID]
    _write(root, "h100_sxm", "quantize", "vllm", "0.24.0", "computescale_perf.parquet",
           pd.DataFrame(rows))
    for family in ("gemm", "attention", "comm"):       # the same kernels under TensorRT-LLM
        shutil.copytree(root / "h100_sxm" / family / "vllm",
                        root / "h100_sxm" / family / "trtllm")
    return root


def build(db, engine, dtype="fp8", tp=2):
    hw = profiles.find_hardware("H100-SXM")
    return from_kernels.build(TINY, "H100-SXM", tp, engine, dtype, "bf16", hw.hbm_bandwidth,
                              root=db)


def test_vllm_fp8_dense_adds_the_scales_of_each_gemm_input_computed_each_step(db):
    """tiny-llama at tp 2 in FP8 under vLLM: the dense term at each measured m is the four
    GEMMs and the element-wise kernels, plus the quantize table's cost of computing the
    FP8 scale of each GEMM's input (widths 512, 256, 512 and 768: the last read between
    the widths timed)."""
    prof = build(db, "vllm")
    shard = ShardShape(TINY, 2)
    gemms = from_kernels.layer_gemms(shard)
    hw = profiles.find_hardware("H100-SXM")
    dense = dict((x, t) for x, t in prof["tables"]["dense"])
    for m in (1, 16, 256):
        scales = 1e-3 * sum(scale_ms(m, k) for k in (512, 256, 512))
        scales += 1e-3 * np.exp(np.interp(np.log(768), np.log([512, 1024]),
                                          np.log([scale_ms(m, 512), scale_ms(m, 1024)])))
        want = (1e-3 * sum(gemm_ms(m, n, k, "fp8") for n, k in gemms.values())
                + from_kernels.elementwise_s(m, shard, hw.hbm_bandwidth) + scales)
        assert dense[m] == pytest.approx(want, rel=1e-3)
    assert prof["source"]["kernels"]["activation_scales"] == "0.24.0 dynamic_minus_static"
    # the scales are vLLM's FP8 serving's: bf16 weights, and TensorRT-LLM's FP8 (static
    # scales in NVIDIA's checkpoints), leave the dense term at its GEMMs and element-wise
    # kernels
    for engine, dtype, gemm_dtype in (("vllm", "bf16", "bfloat16"), ("trtllm", "fp8", "fp8")):
        dense = dict((x, t) for x, t in build(db, engine, dtype)["tables"]["dense"])
        want = (1e-3 * sum(gemm_ms(16, n, k, gemm_dtype) for n, k in gemms.values())
                + from_kernels.elementwise_s(16, shard, hw.hbm_bandwidth))
        assert dense[16] == pytest.approx(want, rel=1e-3)


def _cost(path, model="llama-3.1-8b", gpu="H100-SXM", tp=1, dtype="fp8", kv="fp8"):
    return CalibratedCostModel(profiles.find_model(model), profiles.find_hardware(gpu), tp,
                               dtype, kv, CalibratedConfig(profile=str(path)))


TRT_8B = "calibrated/gpu/h100-sxm/trtllm/llama-3.1-8b-tp1-fp8-kvfp8.yaml"


def test_a_trtllm_decode_step_at_large_batch_costs_its_kernels_not_its_host_time_too():
    """The shipped TensorRT-LLM profile of Llama-3.1-8B FP8 on H100 at the decode step of the
    128-in / 2,048-out row (488 sequences, the KV cache's limit, at their mean context of
    1,152), on the engine it was published on (``trtllm@pytorch``): the step is its GPU
    work (layers x (dense + attention) + the LM head + the attention's per-sequence cost),
    about 22.8 ms; the preset's host time (0.58 ms + 29 us a sequence, 14.7 ms) runs while
    the GPU does (TensorRT-LLM's overlap scheduler), where the profile's old host default
    was added after the kernels (3.4 ms more a step)."""
    from sim.config import engines
    from sim.cost.engine_host import with_engine_host
    kernels = _cost(TRT_8B)
    preset = engines.resolve("trtllm@pytorch")
    cost = with_engine_host(kernels, preset)
    prof = kernels.profile
    batch, keys = 488, 488 * 1152
    layers = 32
    over = prof.overhead
    # the attention's cost per sequence, which the overhead holds beside the host's
    attn_per_seq = over.per_seq_s - over.host_per_seq_s
    assert attn_per_seq == pytest.approx(layers * over.attn_decode_per_seq_per_layer_s,
                                         rel=1e-3)
    gpu = (layers * (float(kernels.dense_s(np.array([batch]))[0])
                     + float(kernels.attn_decode_s(np.array([keys]))[0]))
           + attn_per_seq * batch + float(kernels.lm_head_s(np.array([batch]))[0]))
    host = preset.host_constant_s + preset.host_per_seq_s * batch
    assert host < gpu
    step = cost.step_scalar(batch, batch, 0.0, keys)[0]
    assert step == pytest.approx(gpu, rel=1e-9)
    assert 0.021 < step < 0.024
    old_host = over.constant_s + over.host_per_seq_s * batch
    assert kernels.step_scalar(batch, batch, 0.0, keys)[0] == pytest.approx(gpu + old_host,
                                                                           rel=1e-9)
