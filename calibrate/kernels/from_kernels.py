"""A calibrated profile from GPU kernels measured on real GPUs (``calibrate.kernels.kernel_db``).

``fleetsim calibrate --from aiconfigurator --gpu H100-SXM --engine vllm --model
llama-3.1-70b --tp 4 --dtype fp8`` writes the same profile as ``fleetsim
calibrate`` on a device, with each term read from the database's kernels at
the model's shapes on one tensor-parallel shard:

- ``dense`` by tokens m: the four GEMMs of a layer (QKV, attention output,
  gate+up, down) in the weight dtype (each read from its measured curve, a point
  timed slower than a larger m read as that m's time, ``GemmCurves``), plus the
  layer's memory-bound
  element-wise kernels (two RMSNorms with their residual adds, SiLU-and-mul,
  rotary embedding with the KV-cache write), which the database does not
  time: bytes moved / (HBM bandwidth x 0.8) + 3 us each, the database's own
  model of such kernels. For a mixture of experts, at each token count the
  MoE table times: the attention GEMMs (QKV, output), the router GEMM (hidden
  x experts, bf16, as engines keep it), the MoE op (routing, expert GEMMs and
  their activation, ``KernelDb.moe``: every expert split over the tp GPUs,
  tokens routed evenly where the table has it) and the element-wise kernels
  less SiLU-and-mul, which the MoE op holds;
- ``attn_prefill`` by prefill work (Σ prompt tokens x (context + tokens/2),
  the simulator's measure): context attention of b prompts of s tokens is
  work b·s²/2, from batches of up to 4 prompts (a chunked-prefill step holds
  one prompt's chunk or a few);
- ``attn_decode`` by keys read (Σ context + 1): generation attention of b
  sequences of s keys reads b·s, less what the kernel spends per sequence
  (fitted as α·b + β·keys + γ), which goes to the per-sequence overhead as
  ``fleetsim calibrate`` puts it;
  For vLLM with FP8 weights, each GEMM input also pays for computing its FP8 scale at
  run time (``dynamic_scales_s``): the database's quantize table, what a scale per token
  costs over a fixed one (``KernelDb.activation_scales``). The quantisation itself is in
  the FP8 GEMM rows already: AIConfigurator times vLLM's whole FP8 linear layer, which
  quantises its bf16 input before the GEMM (on H100 the smallest FP8 GEMM is timed 2.1 us
  over the bf16 one, the fixed-scale quantisation kernel's own time). vLLM 0.9 and 0.10
  (the validated FP8 rows) do not fuse that quantisation into RMSNorm under their V1
  engine (``PassConfig.enable_fusion`` defaults to ``not VLLM_USE_V1``), and their FP8
  checkpoints scale activations at run time (``--quantization fp8``: one scale per
  tensor; Meta's FP8 checkpoints: one per token), so the scales are a cost of every step;
- ``lm_head`` by sequences: the vocabulary GEMM, in bf16 (quantised
  checkpoints keep it so);
- ``tp_comm`` by tokens: two all-reduces of tokens x hidden bf16 elements
  per layer over ``tp`` GPUs (none at tp 1).

The per-step and per-sequence host overheads (below) are fleetsim's old host defaults;
the engine preset the pool runs (``profiles/engines.yaml``) replaces them with its own
host time, added to the step or overlapped with it (``sim/cost/engine_host.py``).

The database times attention at many (batch, length) pairs that give one
work or key count; the table keeps their isotonic fit in log time, and the
profile records its error against every point it was built from
(``fit_error``) and, refitted without every fourth point, on those
(``held_back_error``). The per-step and per-sequence host overheads are not
kernels and are not in the database: the profile carries fleetsim's roofline
defaults for them (``overhead``), as its note says.
"""
from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np

from calibrate.fitting.profile_file import sig, table_rows, write_profile
from calibrate.fitting.shapes import ModelShape, ShardShape, load_model
from calibrate.fitting.tables import TERMS, error_summary, evaluate, fit_term, split_per_seq
from calibrate.kernels.kernel_db import GPU_FOLDERS, KernelDb, KernelDbError
from calibrate.output import check_profile_files
from sim.config import profiles
from sim.config.errors import ScenarioError
from sim.cost.profile_schema import PROFILE_KIND, PROFILE_VERSION
from sim.config.inputs import shown
from sim.config.scenario import PoolConfig
from sim.cost.measured import profile_name
from sim.cost.memory import kv_budget
from sim.cost.roofline import RooflineConfig
from sim.output.files.output_paths import os_error

ACT_BYTES = 2.0                 # activations are bf16 whatever the weights
ELEMENTWISE_BW_SHARE = 0.8      # the database's model of memory-bound kernels
ELEMENTWISE_LAUNCH_S = 3e-6
MIN_PREFILL_TOKENS = 16         # shorter "prompts" are decode-like; not a prefill point
# a chunked-prefill step holds one prompt's chunk or a few: the prefill table is built from
# batches of up to this many prompts (many short prompts at once cost more per unit of work)
PREFILL_MAX_BATCH = 4
SOURCE = "aiconfigurator"
# (engine, weight dtype) whose FP8 GEMM inputs get scales computed at run time each step
# (vLLM 0.9/0.10 FP8 serving; see the module's docstring)
DYNAMIC_SCALES = {("vllm", "fp8")}
DENSE_NOTE = ("dense = the layer's four GEMMs in the weight dtype plus its element-wise "
              "kernels (bytes / (HBM bandwidth x 0.8) + 3 us each, not timed in the database)")
MOE_NOTE = ("dense = at each token count the MoE table times, the layer's attention GEMMs "
            "(QKV, output) in the weight dtype, its router GEMM (hidden x experts, bf16; "
            "below the narrowest GEMM the database times, read as that one), the MoE op as "
            "timed (routing, expert GEMMs and activation; source.kernels.moe) and the other "
            "element-wise kernels (bytes / (HBM bandwidth x 0.8) + 3 us each, not timed in "
            "the database)")


def elementwise_s(m: float, shard: ShardShape, hbm_bytes_per_s: float,
                  mlp_activation: bool = True) -> float:
    """One layer's memory-bound kernels for m tokens: each reads and writes its
    activations once (RMSNorm + residual twice; SiLU-and-mul reads the gate and up halves
    and writes one, unless a fused MoE op holds it; rotary embedding and the KV write read
    q, k, v)."""
    h, ffn = shard.hidden, shard.ffn
    qkv = (shard.heads + 2 * shard.kv_heads) * shard.head_dim
    act = [3 * ffn] if mlp_activation else []
    per_token = [2 * 2 * h, 2 * 2 * h, *act, 2 * qkv]             # elements moved
    bw = hbm_bytes_per_s * ELEMENTWISE_BW_SHARE
    return sum(m * e * ACT_BYTES / bw + ELEMENTWISE_LAUNCH_S for e in per_token)


def dynamic_scales_s(m: float, gemms, scales) -> float:
    """What computing the FP8 scales of the inputs of ``gemms`` ((n, k) each) at run time
    costs for m tokens, from the database's curve (``KernelDb.activation_scales``)."""
    return sum(scales.seconds(m, 1, k) for _, k in gemms)


def layer_gemms(shard: ShardShape) -> dict[str, tuple[int, int]]:
    """(n, k) of each GEMM of one layer on one shard (x @ W with W of k x n)."""
    h, hd = shard.hidden, shard.head_dim
    q_out = shard.heads * hd
    return {"qkv": (q_out + 2 * shard.kv_heads * hd, h), "o_proj": (h, q_out),
            "gate_up": (2 * shard.ffn, h), "down": (h, shard.ffn)}


def moe_layer_gemms(shard: ShardShape) -> dict[str, tuple[int, int]]:
    """(n, k) of the GEMMs of a mixture-of-experts layer outside its MoE op: attention's,
    on one shard, and the router's (replicated on every GPU)."""
    gemms = layer_gemms(shard)
    return {"qkv": gemms["qkv"], "o_proj": gemms["o_proj"],
            "router": (shard.num_experts, shard.hidden)}


def _moe_dense_points(shape: ModelShape, shard: ShardShape, db: KernelDb, gemm, head_gemm,
                      dtype: str, hbm_bytes_per_s: float, scales=None):
    """The dense term of a mixture-of-experts layer at each token count the MoE table
    times, and that table's rows."""
    try:
        moe = db.moe(shape.hidden_size, shape.ffn_size, shape.experts_per_token,
                     shape.num_experts, shard.tp, dtype)
    except KernelDbError as exc:
        raise KernelDbError(f"{shape.name} is a mixture of experts: {exc}") from None
    gemms = moe_layer_gemms(shard)
    router_n, router_k = gemms.pop("router")
    points = [(float(m), sum(gemm.seconds(m, n, k) for n, k in gemms.values())
               + head_gemm.seconds(m, router_n, router_k) + float(t)
               + elementwise_s(m, shard, hbm_bytes_per_s, mlp_activation=False)
               + (dynamic_scales_s(m, gemms.values(), scales) if scales else 0.0))
              for m, t in zip(moe.tokens, moe.seconds)]
    return points, moe


def _fit(points: list[tuple[float, float]], extra: list[float] | None = None,
         holdback: int = 4):
    """Table of all points (less ``extra`` seconds each, held elsewhere), its error on
    every point, and the error on every ``holdback``-th point (sorted by x) of a table
    fitted without them."""
    extra = [0.0] * len(points) if extra is None else list(extra)
    fit = fit_term(points, holdback, extra)
    xs = np.array([float(x) for x, _ in points])
    fitted = evaluate(fit.table, xs) + np.array(extra)
    fit_err = error_summary([(float(t), float(f)) for (_, t), f in zip(points, fitted)])
    return fit.table, fit_err, fit.errors(), len(points)


def build(shape: ModelShape, hardware: str, tp: int, engine: str, dtype: str,
          kv_dtype: str, hbm_bytes_per_s: float, version: str | None = None,
          root: str | Path | None = None) -> dict:
    """The profile (a mapping, as ``fleetsim calibrate`` writes it)."""
    try:
        shard = ShardShape(shape, tp)
    except ValueError as exc:
        raise KernelDbError(str(exc)) from None
    db = KernelDb.open(hardware, engine, version, root)
    gemm = db.gemm_curves(dtype)
    head_gemm = db.gemm_curves("bf16") if dtype != "bf16" else gemm
    ms = gemm.m_grid()
    found = db.activation_scales() if (engine, dtype) in DYNAMIC_SCALES else None
    scales, scales_label = found if found else (None, None)
    moe = None
    if shape.num_experts > 1:
        dense_pts, moe = _moe_dense_points(shape, shard, db, gemm, head_gemm, dtype,
                                           hbm_bytes_per_s, scales)
    else:
        shapes = layer_gemms(shard)
        dense_pts = [(m, sum(gemm.seconds(m, n, k) for n, k in shapes.values())
                      + elementwise_s(m, shard, hbm_bytes_per_s)
                      + (dynamic_scales_s(m, shapes.values(), scales) if scales else 0.0))
                     for m in ms]
    vocab = math.ceil(shape.vocab_size / tp)
    head_pts = [(m, head_gemm.seconds(m, vocab, shard.hidden)) for m in head_gemm.m_grid()]
    b, s, t, prefill_kernel = db.attention("context", shard.heads, shard.kv_heads,
                                           shard.head_dim, kv_dtype)
    keep = (s >= MIN_PREFILL_TOKENS) & (b <= PREFILL_MAX_BATCH)
    prefill_pts = list(zip(b[keep] * s[keep] ** 2 / 2.0, t[keep]))
    b, s, t, decode_kernel = db.attention("generation", shard.heads, shard.kv_heads,
                                          shard.head_dim, kv_dtype)
    decode_pts = list(zip(b * s, t))
    # what a decode kernel spends per sequence goes to the per-sequence overhead (x layers),
    # as fleetsim calibrate does: the table then depends on the keys read alone
    attn_per_seq, _ = split_per_seq(b, b * s, t)
    comm_kernel = None
    if tp > 1:
        elems, secs, comm_kernel = db.allreduce(tp)
        comm = list(zip(elems, secs))                  # log-log between sizes, as tables are
        comm_pts = [(m, 2.0 * float(evaluate(comm, m * shard.hidden))) for m in ms]
    else:
        comm_pts = [(m, 0.0) for m in ms]
    points = {"dense": dense_pts, "attn_prefill": prefill_pts, "attn_decode": decode_pts,
              "lm_head": head_pts, "tp_comm": comm_pts}
    tables, fit_error, held_error, counts = {}, {}, {}, {}
    extras = {"attn_decode": list(attn_per_seq * b)}
    for term in TERMS:
        tables[term], fit_error[term], held_error[term], counts[term] = _fit(
            points[term], extras.get(term))
    defaults = RooflineConfig()
    kernels = {"gemm": f"{db.version} {dtype}",
               # timed slower than a larger m of the same shape, read as that m's time
               "gemm_points_capped": gemm.capped + (head_gemm.capped if head_gemm is not gemm
                                                    else 0),
               "attention_prefill": prefill_kernel,
               "attention_decode": decode_kernel, "allreduce": comm_kernel}
    if (engine, dtype) in DYNAMIC_SCALES:
        # None: the database has no quantize table for this GPU and engine
        kernels["activation_scales"] = scales_label
    if moe is not None:
        kernels["moe"] = moe.describe()
    return {
        "kind": PROFILE_KIND, "version": PROFILE_VERSION,
        "model": shape.shape_dict(),
        "device": "cuda", "device_name": hardware, "dtype": dtype, "kv_dtype": kv_dtype,
        "tp": tp, "engine_name": engine,
        "source": {**db.provenance(), "kernels": kernels},
        "date": _dt.date.today().isoformat(), "quick": False,
        "note": ("Seconds for ONE transformer layer on ONE tensor-parallel shard, from GPU "
                 "kernels measured on real GPUs (AIConfigurator's database): "
                 + (DENSE_NOTE if moe is None else MOE_NOTE) + "; attn_prefill by Σ prompt tokens x (context + tokens/2); attn_decode by keys "
                 "read, less a cost per sequence that the overhead holds (attn_decode_per_seq_per_layer_s, x layers); attn_prefill from batches of up to 4 prompts; lm_head (bf16) by sequences; tp_comm = two all-reduces of tokens x "
                 "hidden bf16 elements. The simulator multiplies the layer terms by the "
                 "layer count and adds lm_head and the overhead. The overhead (host time per "
                 "step and per sequence) is not a kernel and not in the database: these are "
                 "fleetsim's roofline defaults"
                 + ("; dense includes computing the FP8 activation scales at run time "
                    "(source.kernels.activation_scales)" if scales else "")
                 + ". fit_error: the tables against every database "
                 "point they were built from; held_back_error: refitted without every fourth "
                 "x, on those."),
        "tables": {term: table_rows(tables[term]) for term in TERMS},
        "tp_comm_measured": tp > 1,
        "overhead": {"constant_s": sig(defaults.step_overhead),
                     "per_seq_s": sig(defaults.per_seq_overhead
                                      + shape.num_layers * attn_per_seq),
                     "attn_decode_per_seq_per_layer_s": sig(attn_per_seq),
                     "host_per_seq_s": sig(defaults.per_seq_overhead)},
        "points": counts, "fit_error": fit_error, "held_back_error": held_error,
    }


def room_for_kv(model: str, hardware: str, tp: int, dtype: str, kv_dtype: str) -> bool:
    """Whether ``model`` at ``tp`` leaves a KV block on ``hardware`` at fleetsim's default
    pool memory settings (utilisation, reserve, block size). A model fleetsim does not
    ship is not checked."""
    spec, hw = profiles.find_model(model), profiles.find_hardware(hardware)
    if spec is None:
        return True
    pool = PoolConfig(model=model, hardware=hardware)
    return kv_budget(spec, hw, tp=tp, weight_dtype=dtype, kv_dtype=kv_dtype,
                     block_size_tokens=pool.block_size,
                     gpu_memory_utilization=pool.gpu_memory_utilization,
                     activation_reserve_bytes=pool.activation_reserve,
                     kv_cache_bytes=None).num_blocks > 0


def default_folder(hardware: str, engine: str) -> Path:
    return Path("profiles") / "calibrated" / "gpu" / hardware.lower() / engine


def write(profile: dict, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    path = out / profile_name(profile["model"]["name"], profile["tp"], profile["dtype"],
                              profile["kv_dtype"])
    write_profile(profile, path)
    return path


def command(args) -> int:
    """``fleetsim calibrate --from aiconfigurator``: a profile built from the database of
    GPU kernels measured on real GPUs, written where ``--out`` (or the shipped folder of
    the GPU and engine) says, replacing only a profile fleetsim wrote."""
    if args.gpu is None:
        raise ScenarioError(f"calibrate --from {args.source}: name the GPU with --gpu "
                            f"({', '.join(sorted(GPU_FOLDERS))})")
    hw = profiles.find_hardware(args.gpu)
    if hw is None:
        raise ScenarioError(f"--gpu {args.gpu}: unknown GPU; known: "
                            f"{', '.join(sorted(GPU_FOLDERS))}")
    dtype, kv_dtype = args.dtype or "bf16", args.kv_dtype or "bf16"
    args.engine = args.engine or "vllm"
    try:
        shape = load_model(args.model)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if not room_for_kv(shape.name, hw.name, args.tp, dtype, kv_dtype):
        spec = profiles.find_model(shape.name)
        raise ScenarioError(
            f"{shape.name} in {dtype} ({spec.weight_bytes(dtype) / 2 ** 30:.1f} GiB of "
            f"weights) leaves no room for a KV cache on {args.tp} x {hw.name} "
            f"({hw.planning_memory / 2 ** 30:.1f} GiB each)")
    out = Path(args.out) if args.out else default_folder(hw.name, args.engine)
    check_profile_files(out / profile_name(shape.name, args.tp, dtype, kv_dtype))
    try:
        profile = build(shape, hw.name, args.tp, args.engine, dtype, kv_dtype,
                        hw.hbm_bandwidth, version=args.engine_version, root=args.kernel_db)
    except KernelDbError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        path = write(profile, out)
    except OSError as exc:
        raise os_error(exc, out, started=True) from None
    if not args.quiet:
        src = profile["source"]
        print(f"{shape.name} tp={args.tp} {dtype} (KV {kv_dtype}) on {hw.name} from "
              f"{src['engine']} {src['engine_version']} kernels "
              f"(aiconfigurator-core {src['package_version']}):")
        for term, err in profile["fit_error"].items():
            if err["points"]:
                held = profile["held_back_error"][term]
                print(f"  {term:<13} {err['points']:5d} points: median {100 * err['median']:5.1f}%"
                      f" max {100 * err['max']:6.1f}%; held back: median "
                      + ("n/a" if held["median"] is None else f"{100 * held['median']:.1f}%"))
    print(f"wrote {shown(path)}")
    return 0
