"""One calibration run: benchmarks → fitted tables → profile YAML, plot and log.

    from calibrate.microbench.run import calibrate
    result = calibrate("tiny-llama", device="cpu")      # profiles/calibrated/cpu/tiny-llama.yaml

The profile is written through its declared schema (``sim.cost.profile_schema``), which
``sim.cost.calibrated.CalibratedCostModel`` reads it by.
"""
from __future__ import annotations

import datetime as _dt
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from calibrate.fitting.profile_file import sig, table_rows, write_profile
from calibrate.fitting.shapes import ModelShape, ShardShape, load_model
from calibrate.fitting.tables import (TERMS, error_summary, fit_overhead, fit_term,
                                      held_back_indices, predict_steps, split_per_seq,
                                      terms_seconds)
from calibrate.microbench import bench, timing
from calibrate.microbench import forwards as whole
from calibrate.microbench.model import LlamaLike
from calibrate.microbench.plot import plot_profile
from calibrate.output import check_profile_files
from sim.cost.profile_schema import PROFILE_KIND, PROFILE_VERSION
from sim.output.files.atomic_write import write_file
from sim.output.files.output_names import slug

NOTE = ("Seconds for ONE transformer layer on ONE tensor-parallel shard, measured with torch "
        "on the device; the simulator multiplies the layer terms (dense, attn_prefill, "
        "attn_decode, tp_comm) by the model's layer count and adds lm_head and the per-step "
        "overhead. TP shards the shapes (heads/tp, kv_heads/tp, ffn/tp, vocab/tp). Tables are "
        "monotone [x, seconds] points, interpolated in log-log space, flat below the first "
        "point (zero at x = 0) and proportional to x past the last. dense x = tokens in the "
        "step; attn_prefill x = Σ chunk·(context + chunk/2); attn_decode x = Σ context "
        "(incl. the new token) of decoding sequences; lm_head x = sequences; tp_comm x = "
        "tokens (two all-reduces per layer; when not measured, the simulator uses the "
        "roofline of the pool's interconnect).")

TIMING_CPU_THREAD = ("median of repeats in interleaved rounds; CPU time of the single compute "
                     "thread (its duration on a core of its own, blind to other processes)")
TIMING_GPU = ("median of repeats in interleaved rounds; CUDA events around back-to-back calls "
              "(terms), wall clock around synchronised whole forwards")
HELD_BACK_NOTE = ("Relative error on every {k}th measured point (sorted by x) of a table fitted "
                  "without it; the shipped tables use every point. whole_forward: the same for "
                  "every 3rd whole forward of the plain-torch model, held back from the overhead "
                  "fit; whole_forward_all: the shipped profile against all whole forwards.")


def device_slug(device: str) -> str:
    if device == "cpu":
        return "cpu"
    name = timing.device_name(device).lower()
    name = re.sub(r"^nvidia\s+", "", name)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or device


def profile_stem(model_name: str, tp: int) -> str:
    """The profile's file name (no suffix): a safe slug of the model's name, never a path
    (a model file's ``name: ../../x`` stays inside the output folder)."""
    name = slug(model_name)
    return name if tp == 1 else f"{name}-tp{tp}"


class RunLog:
    """Prints as it goes and keeps the lines for the log file."""

    def __init__(self, echo=print) -> None:
        self.lines: list[str] = []
        self._echo = echo
        self._t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        line = f"[{time.perf_counter() - self._t0:7.1f}s] {msg}"
        self.lines.append(line)
        if self._echo is not None:
            self._echo(line)

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0


@dataclass
class Result:
    profile: dict
    yaml_path: Path
    plot_path: Path | None
    log_path: Path
    elapsed_s: float
    errors: dict = field(default_factory=dict)


def calibrate(model: str | ModelShape, device: str = "cpu", tp: int = 1,
              out: str | Path | None = None, quick: bool = False, dtype: str | None = None,
              threads: int | None = None, max_tokens: int | None = None,
              holdback: int = 4, plot: bool = True, echo=print, **settings_kw) -> Result:
    """Benchmark ``model``'s layer shapes on ``device`` and write its profile.

    ``out`` is a folder (default ``profiles/calibrated/<device>/``); the
    profile is ``<model>.yaml`` (``<model>-tp<N>.yaml`` when tp > 1), with
    the plot (``.png``) and the run log (``.log``) beside it.
    """
    shape = load_model(model) if isinstance(model, str) else model
    settings = timing.Settings(device=device, dtype=dtype, tp=tp, threads=threads,
                              max_tokens=max_tokens, quick=quick, **settings_kw)
    shard = ShardShape(shape, tp)
    out_dir = (Path(out) if out is not None
               else Path("profiles") / "calibrated" / device_slug(device))
    stem = profile_stem(shape.name, tp)
    check_profile_files(out_dir / f"{stem}.yaml", ".png", ".log")   # before any timing
    log = RunLog(echo)
    timing.setup(settings)
    dev_name = timing.device_name(device)
    log(f"calibrating {shape.name} (tp={tp}: {shard.heads} heads, {shard.kv_heads} KV heads, "
        f"MLP {shard.ffn}) on {device} ({dev_name}), {settings.dtype}, torch {torch.__version__}"
        + (f", {settings.threads} thread(s)" if device == "cpu" else "")
        + (", quick" if quick else ""))
    g = bench.grids(shard, settings)
    timer = timing.Timer(settings)
    # the plain-torch model for whole forwards (→ per-step overhead)
    layers = whole.forward_layers(shard, settings)
    shapes = ([whole.prefill_shape(n) for n in g.forward_prefill]
              + [whole.decode_shape(b, c) for b, c in g.forward_decode])
    max_pos = max([n for n in g.forward_prefill] + [c + 1 for _, c in g.forward_decode]) + 1
    net = LlamaLike(shard, device, settings.torch_dtype, num_layers=layers,
                    max_positions=max_pos, seed=settings.seed)
    # every term's sizes and every whole forward timed in the same interleaved rounds,
    # so that a slow spell of the machine weighs on all of them alike
    cases = (bench.term_cases(shard, settings, g, log)
             + whole.forward_cases(net, shapes, timer, settings.seed))
    log(f"  whole forwards: {len(shapes)} shapes, {layers} layers built; "
        f"{len(cases)} cases in {settings.rounds} rounds")
    seconds = bench.measure_cases(cases, timer, log)
    del net
    measured = {t: bench.points(cases, seconds, t)
                for t in ("dense", "attn_prefill", "attn_decode", "lm_head")}
    forwards = whole.forwards_from(cases, seconds)
    del cases
    measured["tp_comm"], comm_measured = bench.bench_tp_comm(shard, settings, g.tp_comm, log)
    dec = measured["attn_decode"]
    dec_batch = np.array([p.meta["batch"] for p in dec], dtype=np.float64)
    attn_per_seq, _ = split_per_seq(dec_batch, np.array([p.x for p in dec]),
                                    np.array([p.seconds for p in dec]))
    extras = {"attn_decode": list(attn_per_seq * dec_batch)}
    fits = {t: fit_term([(p.x, p.seconds) for p in measured[t]], holdback, extras.get(t))
            for t in TERMS}
    tables = {t: fits[t].table for t in TERMS}
    log(f"  decode attention per sequence: {1e6 * attn_per_seq:.2f} us per layer "
        f"(moved into the per-sequence overhead)")
    cols = {k: np.array([getattr(f, k) for f in forwards], dtype=np.float64)
            for k in ("num_tokens", "num_seqs", "prefill_attn_work", "decode_kv_tokens",
                      "seconds")}
    terms = (terms_seconds(tables, layers, cols["num_tokens"], cols["num_seqs"],
                           cols["prefill_attn_work"], cols["decode_kv_tokens"])
             + layers * attn_per_seq * cols["num_seqs"])
    held_fw = set(held_back_indices(len(forwards), 3))
    fit_idx = np.array([i for i in range(len(forwards)) if i not in held_fw], dtype=int)
    step_cols = (cols["num_tokens"], cols["num_seqs"], cols["prefill_attn_work"],
                 cols["decode_kv_tokens"])
    # held-back check: overhead fitted without every third forward, compared with those
    const_s, fitted_per_seq_s = fit_overhead(cols["seconds"][fit_idx], terms[fit_idx],
                                             cols["num_seqs"][fit_idx])
    pred_held = predict_steps(tables, (const_s, fitted_per_seq_s + layers * attn_per_seq),
                              layers, *step_cols)
    # the profile's overhead: fitted to every forward
    const_s, fitted_per_seq_s = fit_overhead(cols["seconds"], terms, cols["num_seqs"])
    pred = predict_steps(tables, (const_s, fitted_per_seq_s + layers * attn_per_seq), layers,
                         *step_cols)
    # the profile's per-sequence overhead is for the whole model's layers
    overhead = (const_s, fitted_per_seq_s + shape.num_layers * attn_per_seq)

    errors = {t: fits[t].errors() for t in TERMS if fits[t].held_back and
              any(row[1] > 0 for row in fits[t].held_back)}
    errors["whole_forward"] = error_summary([(cols["seconds"][i], pred_held[i])
                                             for i in sorted(held_fw)])
    errors["whole_forward_all"] = error_summary(list(zip(cols["seconds"], pred)))

    profile = {
        "kind": PROFILE_KIND,
        "version": PROFILE_VERSION,
        "model": shape.shape_dict(),
        "device": device,
        "device_name": dev_name,
        "torch_version": str(torch.__version__),
        "dtype": settings.dtype,
        "tp": tp,
        "threads": settings.threads if device == "cpu" else None,
        "clock": settings.clock,
        "timing": TIMING_CPU_THREAD if settings.clock == "thread" else (
            TIMING_GPU if device == "cuda" else "wall clock"),
        "date": _dt.date.today().isoformat(),
        "quick": quick,
        "note": NOTE,
        "tables": {t: table_rows(tables[t]) for t in TERMS},
        "tp_comm_measured": bool(comm_measured),
        "overhead": {"constant_s": sig(overhead[0]), "per_seq_s": sig(overhead[1]),
                     "attn_decode_per_seq_per_layer_s": sig(attn_per_seq),
                     "fitted_per_seq_s": sig(fitted_per_seq_s)},
        "held_back_error": errors,
        "held_back_note": HELD_BACK_NOTE.format(k=holdback),
        "forward_layers": layers,
        "forwards": [{**f.as_dict(), "seconds": sig(f.seconds), "predicted_s": sig(float(p)),
                      "held_back": i in held_fw}
                     for i, (f, p) in enumerate(zip(forwards, pred))],
        "measured": {**{t: table_rows(fits[t].measured) for t in TERMS},
                     "attn_decode": table_rows(sorted([p.x, p.seconds, p.meta["batch"]]
                                                 for p in dec))},
        "held_back_points": {t: table_rows(fits[t].held_back) for t in TERMS},
        "settings": {"max_tokens": settings.max_tokens, "max_seqs": settings.max_seqs,
                     "warmup": settings.warmup, "rounds": settings.rounds,
                     "min_per_round": settings.min_per_round,
                     "max_per_round": settings.max_per_round,
                     "point_budget_s": settings.point_budget_s, "holdback_every": holdback},
    }
    for i, f in enumerate(forwards):
        tag = " (held back)" if i in held_fw else ""
        what = (f"prefill {f.num_tokens} tokens" if f.kind == "prefill"
                else f"decode {f.num_seqs} x {int(f.decode_kv_tokens / f.num_seqs)} KV")
        log(f"    {what}: measured {1e3 * f.seconds:.3f} ms, predicted {1e3 * pred[i]:.3f} ms "
            f"({100 * (pred[i] - f.seconds) / f.seconds:+.1f}%){tag}")
    log(f"  overhead: {1e6 * overhead[0]:.1f} us + {1e6 * overhead[1]:.2f} us/seq "
        f"({1e6 * fitted_per_seq_s:.2f} fitted + {shape.num_layers} layers x "
        f"{1e6 * attn_per_seq:.2f} decode attention)")
    for name, err in errors.items():
        if err["points"]:
            log(f"  held-back error {name:<18} median {100 * err['median']:5.1f}%  "
                f"max {100 * err['max']:5.1f}%  ({err['points']} points)")
    yaml_path = out_dir / f"{stem}.yaml"
    write_profile(profile, yaml_path)
    plot_path = None
    if plot:
        plot_path = plot_profile(profile, out_dir / f"{stem}.png")
    log(f"wrote {yaml_path}" + (f" and {plot_path.name}" if plot_path else "")
        + f" in {log.elapsed_s:.1f} s")
    log_path = out_dir / f"{stem}.log"
    write_file(log_path, "\n".join(log.lines) + "\n")
    return Result(profile=profile, yaml_path=yaml_path, plot_path=plot_path, log_path=log_path,
                  elapsed_s=log.elapsed_s, errors=errors)
