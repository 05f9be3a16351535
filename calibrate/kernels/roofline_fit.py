"""The roofline's constants, fitted per operation to GPU kernels measured on real GPUs.

    python -m calibrate roofline-fit [--out profiles/calibrated/gpu]

For every GPU the measured-kernel database covers (``calibrate.kernels.kernel_db``, vLLM's
kernels), each operation of ``sim.cost.roofline`` is fitted on its own, at the
shipped dense models' shapes on one tensor-parallel shard (TP 1, 2, 4, 8):

- GEMMs (a layer's four, bf16 and fp8 weights): the fixed time per GEMM and the
  weight-read bandwidth from steps of at most ``SMALL_M`` tokens (least squares on
  relative error: t = 4·fixed + bytes / (HBM bandwidth x efficiency)), then the
  largest FLOP/s share per dtype and the tokens at half of it, shared by both dtypes,
  on every step size up to ``MAX_M`` (a grid search on squared log error);
- prefill attention (context attention, batches of up to 4 prompts of 16 tokens or
  more, bf16 and fp8 KV): fixed time + FLOPs / (bf16 peak x efficiency);
- decode attention (generation attention, every point): fixed time + KV bytes read /
  (HBM bandwidth x efficiency). What the kernel spends per sequence is not a term of
  the roofline (its per-sequence overhead holds such costs): the worst points are
  batches of thousands of sequences holding a few keys each;
- all-reduce (TP 2, 4, 8, messages up to ``MAX_M`` tokens of the largest hidden size):
  latency at two GPUs + a latency per further GPU + ring bytes / (one-way link
  bandwidth x efficiency).

The generic constants (``RooflineConfig``'s defaults) are the median over GPUs of each
one; the two-GPU all-reduce latency is a fact of each GPU and goes to its hardware
profile. The report (``roofline-fit.yaml`` and ``roofline-fit.md``) gives, per GPU and
operation, each fit and how far the roofline sits from the measured kernels: with
the constant efficiencies it had before (``LEGACY``) and with the generic constants.
Nothing here is fitted to whole engine steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from calibrate.fitting.tables import nnls
from calibrate.kernels.from_kernels import MIN_PREFILL_TOKENS, PREFILL_MAX_BATCH, layer_gemms
from calibrate.kernels.gpu_profiles import MODELS, TPS
from calibrate.kernels.kernel_db import KernelDb, KernelDbError
from calibrate.fitting.shapes import ShardShape, load_model
from sim.config import profiles

ENGINE = "vllm"
GEMM_DTYPES = ("bf16", "fp8")
KV_DTYPES = ("bf16", "fp8")
SMALL_M = 8                    # steps this small read their weights: the bandwidth fit
MAX_M = 16384                  # the largest step fitted and compared (a long prefill chunk)
MAX_LM_HEAD_SEQS = 1024
ACT_BYTES = 2.0
# the efficiencies and latencies the roofline had before this fit: its old constant
# defaults, the whole (two-way) link figure, the hardware profiles' all-reduce latencies
LEGACY = {"flops_efficiency": 0.7, "bandwidth_efficiency": 0.85, "attention_efficiency": 0.5,
          "interconnect_efficiency": 0.7}
LEGACY_ALLREDUCE_LATENCY_S = {"H100-SXM": 8e-6, "H200": 8e-6, "B200": 6e-6,
                              "A100-80GB": 10e-6, "L40S": 20e-6}
OPS = ("dense", "lm_head", "attn_prefill", "attn_decode", "allreduce")
HALF_TOKENS_GRID = tuple(sorted({0.0, *np.round(np.geomspace(1, 2048, 56), 1).tolist()}))
EFFICIENCY_GRID = tuple(np.round(np.arange(0.20, 1.0001, 0.005), 3).tolist())


def round_sig(x: float, digits: int = 2) -> float:
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def _relative_lstsq(columns: list[np.ndarray], t: np.ndarray) -> np.ndarray:
    """Non-negative coefficients c minimising Σ((Σ c_j·col_j − t) / t)²."""
    a = np.column_stack(columns) / t[:, None]
    return np.asarray(nnls(a, np.ones_like(t)), dtype=np.float64)


# -- points from the database ---------------------------------------------------------------
@dataclass
class Shard:
    model: str
    tp: int
    shape: ShardShape


def shipped_shards() -> list[Shard]:
    out = []
    for name in MODELS:
        model = load_model(name)
        for tp in TPS:
            try:
                out.append(Shard(name, tp, ShardShape(model, tp)))
            except ValueError:
                continue
    return out


@dataclass
class GemmPoints:
    """One layer's four GEMMs at each step size, one row per (shard, m)."""
    dtype: str
    m: np.ndarray
    weight_params: np.ndarray      # Σ n·k of the four GEMMs
    hidden: np.ndarray
    seconds: np.ndarray
    shard: list = field(default_factory=list)


@dataclass
class GpuPoints:
    gemm: dict                     # dtype -> GemmPoints
    lm_head: list                  # (shard, m, seconds) with bf16 GEMMs
    prefill: list                  # (shard, kv dtype, work, seconds)
    decode: list                   # (shard, kv dtype, keys, seconds)
    allreduce: dict                # tp -> (elements, seconds)
    provenance: dict


def gemm_points(db: KernelDb, dtype: str, shards: list[Shard]) -> GemmPoints:
    curves = db.gemm_curves(dtype)
    ms = [m for m in curves.m_grid() if m <= MAX_M]
    rows = []
    for sh in shards:
        gemms = layer_gemms(sh.shape).values()
        params = sum(n * k for n, k in gemms)
        for m in ms:
            rows.append((m, params, sh.shape.hidden,
                         sum(curves.seconds(m, n, k) for n, k in gemms), sh))
    m, p, h, t, s = zip(*rows)
    return GemmPoints(dtype, np.array(m), np.array(p, dtype=np.float64),
                      np.array(h, dtype=np.float64), np.array(t), list(s))


def collect(hardware: str, root=None) -> GpuPoints:
    db = KernelDb.open(hardware, ENGINE, root=root)
    shards = shipped_shards()
    gemm = {}
    for dtype in GEMM_DTYPES:
        try:
            gemm[dtype] = gemm_points(db, dtype, shards)
        except KernelDbError:
            continue                              # an A100 times no fp8 GEMMs
    head_curves = db.gemm_curves("bf16")
    lm_head = [(sh, m, head_curves.seconds(m, sh.shape.vocab, sh.shape.hidden))
               for sh in shards for m in head_curves.m_grid() if m <= MAX_LM_HEAD_SEQS]
    prefill, decode, seen = [], [], set()
    for sh in shards:
        s = sh.shape
        for kv in KV_DTYPES:
            key = (s.heads, s.kv_heads, s.head_dim, kv)
            if key in seen:
                continue
            seen.add(key)
            try:
                b, n, t, _ = db.attention("context", s.heads, s.kv_heads, s.head_dim, kv)
                keep = (n >= MIN_PREFILL_TOKENS) & (b <= PREFILL_MAX_BATCH)
                prefill += [(sh, kv, w, x) for w, x in zip(b[keep] * n[keep] ** 2 / 2.0,
                                                            t[keep])]
                b, n, t, _ = db.attention("generation", s.heads, s.kv_heads, s.head_dim, kv)
                decode += [(sh, kv, k, x) for k, x in zip(b * n, t)]
            except KernelDbError:
                continue                          # an A100 keeps no fp8 KV cache
    largest = MAX_M * max(sh.shape.hidden for sh in shards)
    allreduce = {}
    for tp in TPS[1:]:
        try:
            elems, secs, _ = db.allreduce(tp)
        except KernelDbError:
            continue
        keep = elems <= largest
        allreduce[tp] = (elems[keep], secs[keep])
    return GpuPoints(gemm, lm_head, prefill, decode, allreduce, db.provenance())


# -- the fits ------------------------------------------------------------------------------------
def dense_model_s(p: GemmPoints, peak_flops: float, hbm: float, fixed_s: float,
                  weight_eff: float, flops_eff: float, half_tokens: float) -> np.ndarray:
    """The roofline's dense term (``RooflineCostModel.dense_s``) at these points."""
    w_bytes = 2.0 if p.dtype == "bf16" else 1.0
    compute = 2.0 * p.weight_params * (p.m + half_tokens) / (peak_flops * flops_eff)
    memory = (p.weight_params * w_bytes + 4.0 * p.m * p.hidden * ACT_BYTES) / (hbm * weight_eff)
    return 4.0 * fixed_s + np.maximum(compute, memory)


def fit_gemm(gemm: dict, hw) -> dict:
    """Fixed time per GEMM and weight-read efficiencies from small steps (one fixed time for
    both dtypes), then each dtype's largest FLOP/s share and the shared half-share tokens."""
    ts, order = [], list(gemm)
    small = {d: p.m <= SMALL_M for d, p in gemm.items()}
    n_small = sum(int(s.sum()) for s in small.values())
    cols = [np.full(n_small, 4.0)] + [np.zeros(n_small) for _ in order]
    at = 0
    for j, d in enumerate(order):
        p, sel = gemm[d], small[d]
        w_bytes = 2.0 if d == "bf16" else 1.0
        k = int(sel.sum())
        cols[1 + j][at:at + k] = (p.weight_params[sel] * w_bytes
                                  + 4.0 * p.m[sel] * p.hidden[sel] * ACT_BYTES) / hw.hbm_bandwidth
        ts.append(p.seconds[sel])
        at += k
    coef = _relative_lstsq(cols, np.concatenate(ts))
    fixed = float(coef[0])
    weight_eff = {d: min(1.0, 1.0 / float(coef[1 + j])) for j, d in enumerate(order)}
    eff = np.array(EFFICIENCY_GRID)
    loss = np.zeros((len(HALF_TOKENS_GRID), len(order)))
    best_eff = np.zeros_like(loss)
    for i, half in enumerate(HALF_TOKENS_GRID):
        for j, d in enumerate(order):
            p = gemm[d]
            peak = hw.compute_flops_per_s(d)
            pred = dense_model_s(p, peak, hw.hbm_bandwidth, fixed, weight_eff[d],
                                 eff[:, None], half)
            sq = np.mean(np.log(pred / p.seconds) ** 2, axis=1)
            loss[i, j], best_eff[i, j] = sq.min(), eff[int(sq.argmin())]
    i = int(loss.sum(axis=1).argmin())
    return {"gemm_fixed_time_s": fixed, "gemm_half_tokens": HALF_TOKENS_GRID[i],
            "flops_efficiency": {d: float(best_eff[i, j]) for j, d in enumerate(order)},
            "weight_bandwidth_efficiency": weight_eff}


def fit_fixed_plus_rate(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(fixed seconds, efficiency) of t = fixed + x / efficiency (x: seconds at peak)."""
    fixed, inverse = _relative_lstsq([np.ones_like(t), x], t)
    return float(fixed), float(min(1.0, 1.0 / inverse)) if inverse > 0 else 1.0


def fit_prefill(points: list, hw) -> dict:
    x = np.array([4.0 * sh.shape.heads * sh.shape.head_dim * w for sh, _, w, _ in points])
    t = np.array([s for *_, s in points])
    fixed, eff = fit_fixed_plus_rate(x / hw.flops["bf16"], t)
    return {"attention_prefill_fixed_time_s": fixed, "attention_efficiency": eff}


def kv_bytes_per_key(shard: ShardShape, kv_dtype: str) -> float:
    return 2.0 * shard.kv_heads * shard.head_dim * (2.0 if kv_dtype == "bf16" else 1.0)


def fit_decode(points: list, hw) -> dict:
    x = np.array([kv_bytes_per_key(sh.shape, kv) * k for sh, kv, k, _ in points])
    t = np.array([s for *_, s in points])
    fixed, eff = fit_fixed_plus_rate(x / hw.hbm_bandwidth, t)
    return {"attention_decode_fixed_time_s": fixed, "bandwidth_efficiency": eff}


def fit_allreduce(tables: dict, hw) -> dict:
    """t = latency + per_gpu·(tp − 2) + 2(tp−1)/tp · bytes / (link one way x efficiency)."""
    cols, ts = [[], [], []], []
    one_way = hw.interconnect_bandwidth / 2.0
    for tp, (elems, secs) in tables.items():
        cols[0].append(np.ones_like(secs))
        cols[1].append(np.full_like(secs, tp - 2.0))
        cols[2].append(2.0 * (tp - 1) / tp * elems * ACT_BYTES / one_way)
        ts.append(secs)
    latency, per_gpu, inverse = _relative_lstsq([np.concatenate(c) for c in cols],
                                                np.concatenate(ts))
    return {"allreduce_latency_s": float(latency), "allreduce_latency_per_gpu_s": float(per_gpu),
            "interconnect_efficiency": float(min(1.0, 1.0 / inverse)) if inverse > 0 else 1.0}


def fit_gpu(hardware: str, points: GpuPoints) -> dict:
    hw = profiles.find_hardware(hardware)
    out = {"gemm": fit_gemm(points.gemm, hw),
           "attn_prefill": fit_prefill(points.prefill, hw),
           "attn_decode": fit_decode(points.decode, hw)}
    if points.allreduce:
        out["allreduce"] = fit_allreduce(points.allreduce, hw)
    return out


def config_values(fit: dict) -> dict:
    """A GPU's fit as RooflineConfig fields (a dtype the GPU does not time: absent)."""
    g = fit["gemm"]
    out = {"flops_efficiency": g["flops_efficiency"]["bf16"],
           "gemm_half_tokens": g["gemm_half_tokens"],
           "weight_bandwidth_efficiency": g["weight_bandwidth_efficiency"]["bf16"],
           "gemm_fixed_time": g["gemm_fixed_time_s"],
           "bandwidth_efficiency": fit["attn_decode"]["bandwidth_efficiency"],
           "attention_efficiency": fit["attn_prefill"]["attention_efficiency"],
           "attention_prefill_fixed_time": fit["attn_prefill"]["attention_prefill_fixed_time_s"],
           "attention_decode_fixed_time": fit["attn_decode"]["attention_decode_fixed_time_s"]}
    if "fp8" in g["flops_efficiency"]:
        out["quantized_flops_efficiency"] = g["flops_efficiency"]["fp8"]
        out["quantized_weight_bandwidth_efficiency"] = g["weight_bandwidth_efficiency"]["fp8"]
    if "allreduce" in fit:
        out["interconnect_efficiency"] = fit["allreduce"]["interconnect_efficiency"]
        out["allreduce_latency_per_gpu"] = fit["allreduce"]["allreduce_latency_per_gpu_s"]
    return out


def generic(per_gpu: dict[str, dict]) -> dict:
    """The median over GPUs of each constant, to two significant digits."""
    values = [config_values(f) for f in per_gpu.values()]
    names = sorted({k for v in values for k in v})
    return {k: round_sig(float(np.median([v[k] for v in values if k in v]))) for k in names}

