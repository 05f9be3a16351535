"""The roofline's shape: a GEMM efficiency that grows with the tokens in a step, weight and
KV reads at their own efficiencies, an all-reduce on the link's one-way bandwidth with a
latency that grows with TP; and the fit of its constants to measured kernels
(``calibrate.kernels.roofline_fit``), on database-like rows made from known constants."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import yaml

from simfactories import hardware_spec, make_cost_model, model_spec
from sim.config.specs import BYTES_PER_ELEMENT
from sim.cost.roofline import FITTED, RooflineConfig

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "profiles" / "calibrated" / "gpu" / "roofline-fit.yaml"


def _achieved_share(cost, num_tokens: float) -> float:
    """Share of peak FLOP/s the dense term's arithmetic reaches at ``num_tokens`` (its fixed
    kernel time aside), where the step is bound by arithmetic."""
    flops = cost._active_flops_per_token * num_tokens
    seconds = float(cost.dense_s(num_tokens)) - 4 * cost.cfg.gemm_fixed_time
    return flops / (seconds * cost.peak_flops_per_gpu)


@pytest.mark.parametrize("weight_dtype,eff_field", [("bf16", "flops_efficiency"),
                                                     ("fp8", "quantized_flops_efficiency")])
def test_gemm_efficiency_grows_with_tokens_and_reaches_its_maximum(weight_dtype, eff_field):
    """Past the weight-bound steps, the share of peak FLOP/s a layer's GEMMs reach never
    falls as the step holds more tokens, follows eff_max·M/(M + gemm_half_tokens), never
    passes eff_max and comes within 1% of it at a million tokens."""
    cost = make_cost_model(model="llama-3.1-70b", tp=4, weight_dtype=weight_dtype)
    eff_max, half = getattr(cost.cfg, eff_field), cost.cfg.gemm_half_tokens
    assert half > 0
    tokens = [2048.0, 4096.0, 8192.0, 16384.0, 65536.0, 1e6]
    shares = [_achieved_share(cost, m) for m in tokens]
    assert all(b >= a for a, b in zip(shares, shares[1:]))
    for m, share in zip(tokens, shares):
        assert share == pytest.approx(eff_max * m / (m + half), rel=1e-9)
        assert share <= eff_max
    assert shares[-1] == pytest.approx(eff_max, rel=0.01)


def test_dense_time_never_falls_with_more_tokens():
    """The dense term is non-decreasing in the tokens of a step, weight-bound and
    arithmetic-bound alike."""
    cost = make_cost_model(model="llama-3.1-8b")
    t = cost.dense_s(np.geomspace(1, 1e5, 400))
    assert np.all(np.diff(t) >= 0)


def test_weight_reads_and_kv_reads_take_their_own_efficiencies():
    """Halving weight_bandwidth_efficiency doubles a batch-1 layer's weight read and leaves
    decode attention alone; halving bandwidth_efficiency doubles the KV read and leaves the
    dense term alone; fp8 weights are read at quantized_weight_bandwidth_efficiency."""
    base = make_cost_model()
    cfg = base.cfg
    fixed = 4 * cfg.gemm_fixed_time
    slow_w = make_cost_model(weight_bandwidth_efficiency=cfg.weight_bandwidth_efficiency / 2)
    assert float(slow_w.dense_s(1.0)) - fixed == pytest.approx(
        2 * (float(base.dense_s(1.0)) - fixed), rel=1e-9)
    kv = np.array([1e3, 1e5])
    np.testing.assert_allclose(slow_w.attn_decode_s(kv), base.attn_decode_s(kv), rtol=1e-12)
    slow_kv = make_cost_model(bandwidth_efficiency=cfg.bandwidth_efficiency / 2)
    d = cfg.attention_decode_fixed_time
    np.testing.assert_allclose(slow_kv.attn_decode_s(kv) - d, 2 * (base.attn_decode_s(kv) - d),
                               rtol=1e-9)
    assert float(slow_kv.dense_s(1.0)) == float(base.dense_s(1.0))
    # fp8 weights: a byte each, at their own efficiency
    m = model_spec("llama-3.1-8b")
    fp8 = make_cost_model(weight_dtype="fp8", quantized_weight_bandwidth_efficiency=0.5)
    weights = (m.attn_params_per_layer + m.expert_params) * BYTES_PER_ELEMENT["fp8"]
    activations = 4.0 * m.hidden_size * 2.0
    assert float(fp8.dense_s(1.0)) - fixed == pytest.approx(
        (weights + activations) / (hardware_spec().hbm_bandwidth * 0.5), rel=1e-9)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_allreduce_uses_half_the_datasheet_link_and_latency_grows_with_tp(tp):
    """Two all-reduces a layer: each takes the hardware's two-GPU latency plus
    allreduce_latency_per_gpu per further GPU, and moves 2(tp-1)/tp of the message at
    interconnect_efficiency of half the datasheet figure (which adds both directions)."""
    hw = hardware_spec("H100-SXM")
    cost = make_cost_model(model="llama-3.1-70b", tp=tp)
    cfg = cost.cfg
    latency = hw.allreduce_latency + cfg.allreduce_latency_per_gpu * (tp - 2)
    assert float(cost.tp_comm_s(0.0)) == pytest.approx(2 * latency, rel=1e-12)
    tokens = 4096.0
    message = tokens * model_spec("llama-3.1-70b").hidden_size * 2.0
    one_way = hw.interconnect_bandwidth / 2 * cfg.interconnect_efficiency
    expected = 2 * (latency + 2 * (tp - 1) / tp * message / one_way)
    assert float(cost.tp_comm_s(tokens)) == pytest.approx(expected, rel=1e-12)
    assert float(cost.step_scalar(tokens, 1.0, 0.0, 0.0)[0]) == pytest.approx(
        float(cost.step_time_s(_shape(tokens))), rel=1e-12)


def _shape(tokens: float):
    from sim.cost.shape import BatchShape
    return BatchShape(num_tokens=tokens, num_seqs=1.0, prefill_attn_work=0.0,
                      decode_kv_tokens=0.0)


def test_allreduce_latency_grows_with_tp():
    """At a one-token message the all-reduce over 8 GPUs takes longer than over 4, and
    that longer than over 2."""
    small = [float(make_cost_model(model="llama-3.1-70b", tp=tp).tp_comm_s(1.0))
             for tp in (2, 4, 8)]
    assert RooflineConfig().allreduce_latency_per_gpu > 0
    assert small[0] < small[1] < small[2]


def test_defaults_are_the_generic_constants_of_the_shipped_fit():
    """RooflineConfig's defaults are the report's generic constants, and each GPU's
    hardware profile carries its fitted two-GPU all-reduce latency."""
    report = yaml.safe_load(REPORT.read_text(encoding="utf-8"))
    assert report["generic"] == FITTED
    cfg = RooflineConfig()
    assert {k: getattr(cfg, k) for k in FITTED} == FITTED
    for gpu, entry in report["gpus"].items():
        assert hardware_spec(gpu).allreduce_latency == pytest.approx(
            entry["hardware_allreduce_latency_s"], rel=1e-9)


def test_old_field_meanings_still_validate():
    """A scenario's roofline block of the old fields still validates; the new fields keep
    their fitted defaults."""
    cfg = RooflineConfig.model_validate({"type": "roofline", "flops_efficiency": 0.6,
                                         "bandwidth_efficiency": 0.8,
                                         "attention_efficiency": 0.4,
                                         "interconnect_efficiency": 0.5,
                                         "step_overhead": "2ms", "per_seq_overhead": "4us"})
    assert cfg.flops_efficiency == 0.6 and cfg.gemm_half_tokens == FITTED["gemm_half_tokens"]


# -- the fit, on database-like rows made from known constants --------------------------------
TRUE = {"gemm_fixed": 3e-6, "weight_eff": {"bf16": 0.8, "fp8": 0.6},
        "flops_eff": {"bf16": 0.75, "fp8": 0.5}, "half": 64.0,
        "attn_eff": 0.55, "prefill_fixed": 12e-6, "kv_eff": 0.85, "decode_fixed": 10e-6,
        "ar_latency": 4e-6, "ar_per_gpu": 0.5e-6, "ar_eff": 0.6}
M_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _write(root: Path, *parts_and_frame):
    *parts, name, frame = parts_and_frame
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / name)


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory):
    """A kernel database laid out like the package's, its latencies from TRUE on the
    H100-SXM datasheet: every GEMM the shipped models' shards (and LM heads) use, prefill
    and decode attention of their head counts, all-reduces over 2, 4 and 8 GPUs."""
    pd = pytest.importorskip("pandas")
    from calibrate.kernels.from_kernels import layer_gemms
    from calibrate.kernels.roofline_fit import shipped_shards
    hw = hardware_spec("H100-SXM")
    root = tmp_path_factory.mktemp("kernels")
    shapes, heads = set(), set()
    for sh in shipped_shards():
        shapes |= set(layer_gemms(sh.shape).values())
        shapes.add((sh.shape.vocab, sh.shape.hidden))
        heads.add((sh.shape.heads, sh.shape.kv_heads, sh.shape.head_dim))
    gemm = []
    for dtype, db_dtype, w_bytes in (("bf16", "bfloat16", 2.0), ("fp8", "fp8", 1.0)):
        peak = hw.compute_flops_per_s(dtype)
        for n, k in sorted(shapes):
            for m in M_GRID:
                memory = n * k * w_bytes / (hw.hbm_bandwidth * TRUE["weight_eff"][dtype])
                compute = 2.0 * n * k * (m + TRUE["half"]) / (peak * TRUE["flops_eff"][dtype])
                gemm.append(dict(gemm_dtype=db_dtype, m=m, n=n, k=k,
                                 latency=1e3 * (TRUE["gemm_fixed"] + max(memory, compute))))
    _write(root, "h100_sxm", "gemm", "vllm", "0.24.0", "gemm_perf.parquet", pd.DataFrame(gemm))
    ctx, gen = [], []
    for h, kv, hd in sorted(heads):
        for kvd, kv_bytes in (("bfloat16", 2.0), ("fp8", 1.0)):
            for b in (1, 2, 4):
                for s in (16, 128, 1024, 4096, 16384):
                    flops = 4.0 * h * hd * b * s * s / 2
                    t = TRUE["prefill_fixed"] + flops / (hw.flops["bf16"] * TRUE["attn_eff"])
                    ctx.append(dict(batch_size=b, isl=s, num_heads=h, num_key_value_heads=kv,
                                    head_dim=hd, kv_cache_dtype=kvd, window_size=0, step=0,
                                    latency=1e3 * t, kernel_source="fa3"))
            for b in (1, 8, 64, 256):
                for s in (128, 2048, 32768):
                    read = 2.0 * kv * hd * kv_bytes * b * s
                    t = TRUE["decode_fixed"] + read / (hw.hbm_bandwidth * TRUE["kv_eff"])
                    gen.append(dict(batch_size=b, isl=s - 1, step=1, num_heads=h,
                                    num_key_value_heads=kv, head_dim=hd, kv_cache_dtype=kvd,
                                    window_size=0, latency=1e3 * t, kernel_source="fa3"))
    _write(root, "h100_sxm", "attention", "vllm", "0.24.0", "context_attention_perf.parquet",
           pd.DataFrame(ctx))
    _write(root, "h100_sxm", "attention", "vllm", "0.24.0",
           "generation_attention_perf.parquet", pd.DataFrame(gen))
    ar = []
    for g in (2, 4, 8):
        for size in np.geomspace(1024, 2 ** 28, 12):
            ring = 2.0 * (g - 1) / g * size * 2.0
            t = (TRUE["ar_latency"] + TRUE["ar_per_gpu"] * (g - 2)
                 + ring / (hw.interconnect_bandwidth / 2 * TRUE["ar_eff"]))
            ar.append(dict(allreduce_dtype="bfloat16", num_gpus=g, message_size=float(size),
                           latency=1e3 * t, kernel_source="vLLM_custom_graph"))
    _write(root, "h100_sxm", "comm", "vllm", "0.24.0", "custom_allreduce_perf.parquet",
           pd.DataFrame(ar))
    return root


def test_fit_recovers_the_constants_of_database_like_rows(synthetic_db):
    """Per operation, the fit finds the constants the rows were made from: GEMM fixed time,
    weight-read and FLOP/s efficiencies per dtype and the half-share tokens; prefill and
    decode attention fixed times and efficiencies; all-reduce latency at two GPUs, its
    growth per GPU and the one-way link efficiency."""
    from calibrate.kernels import roofline_fit
    points = roofline_fit.collect("H100-SXM", root=synthetic_db)
    fit = roofline_fit.fit_gpu("H100-SXM", points)
    g = fit["gemm"]
    assert g["gemm_fixed_time_s"] == pytest.approx(TRUE["gemm_fixed"], rel=0.05)
    for dtype in ("bf16", "fp8"):
        assert g["weight_bandwidth_efficiency"][dtype] == pytest.approx(
            TRUE["weight_eff"][dtype], abs=0.01)
        assert g["flops_efficiency"][dtype] == pytest.approx(TRUE["flops_eff"][dtype],
                                                              abs=0.011)
    assert g["gemm_half_tokens"] == pytest.approx(TRUE["half"], rel=0.15)
    p, d, a = fit["attn_prefill"], fit["attn_decode"], fit["allreduce"]
    assert p["attention_efficiency"] == pytest.approx(TRUE["attn_eff"], rel=1e-6)
    assert p["attention_prefill_fixed_time_s"] == pytest.approx(TRUE["prefill_fixed"], rel=1e-6)
    assert d["bandwidth_efficiency"] == pytest.approx(TRUE["kv_eff"], rel=1e-6)
    assert d["attention_decode_fixed_time_s"] == pytest.approx(TRUE["decode_fixed"], rel=1e-6)
    assert a["allreduce_latency_s"] == pytest.approx(TRUE["ar_latency"], rel=1e-6)
    assert a["allreduce_latency_per_gpu_s"] == pytest.approx(TRUE["ar_per_gpu"], rel=1e-6)
    assert a["interconnect_efficiency"] == pytest.approx(TRUE["ar_eff"], rel=1e-6)


def test_generic_constants_are_the_median_over_gpus():
    """Each generic constant is the median of the GPUs' fits, to two significant digits; a
    constant a GPU could not fit (no fp8 GEMMs) is the median of the others."""
    from calibrate.kernels.roofline_fit import generic

    def fit(eff, fp8=None):
        gemm = {"gemm_fixed_time_s": 1e-6, "gemm_half_tokens": 100.0,
                "flops_efficiency": {"bf16": eff}, "weight_bandwidth_efficiency": {"bf16": 0.8}}
        if fp8 is not None:
            gemm["flops_efficiency"]["fp8"] = fp8
            gemm["weight_bandwidth_efficiency"]["fp8"] = 0.7
        return {"gemm": gemm,
                "attn_prefill": {"attention_prefill_fixed_time_s": 1e-5,
                                 "attention_efficiency": 0.5},
                "attn_decode": {"attention_decode_fixed_time_s": 1e-5,
                                "bandwidth_efficiency": 0.8}}
    out = generic({"a": fit(0.7, 0.4), "b": fit(0.8, 0.6), "c": fit(0.91234)})
    assert out["flops_efficiency"] == 0.8
    assert out["quantized_flops_efficiency"] == 0.5


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="the measured-kernel database (aiconfigurator-core) is not installed")
def test_golden_shipped_report_regenerates_identically(tmp_path):
    """python -m calibrate roofline-fit on the installed database writes the shipped
    report byte for byte."""
    from calibrate.kernels import roofline_report
    report = roofline_report.build_report(log=lambda *_: None)
    yaml_path, md_path = roofline_report.write_report(report, tmp_path)
    assert yaml_path.read_text(encoding="utf-8") == REPORT.read_text(encoding="utf-8")
    assert md_path.read_text(encoding="utf-8") == (
        REPORT.with_suffix(".md")).read_text(encoding="utf-8")
