"""fleetsim against the engine: the same requests simulated, and the figures (TTFT, TPOT,
throughput) of both."""
from __future__ import annotations

import copy
import csv
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

import sim
from calibrate.engines.step_fit import StepRows, step_errors
from calibrate.engines.records import EngineRecord
from calibrate.engines.hf.workload import METRICS, ValidationError, Workload, WorkloadResult


# -- figures -----------------------------------------------------------------------------
def _pct(x, q) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def figures(arrival, first, finish, output_tokens) -> dict:
    arrival, first, finish = (np.asarray(v, dtype=np.float64) for v in (arrival, first, finish))
    out = np.asarray(output_tokens, dtype=np.float64)
    ttft = first - arrival
    gaps = out - 1
    tpot = np.divide(finish - first, gaps, out=np.full(len(out), np.nan), where=gaps > 0)
    span = float(finish.max() - arrival.min())
    return {"ttft_p50_s": _pct(ttft, 50), "ttft_p90_s": _pct(ttft, 90),
            "ttft_p99_s": _pct(ttft, 99), "tpot_p50_s": _pct(tpot, 50),
            "tpot_p90_s": _pct(tpot, 90), "e2e_p50_s": _pct(finish - arrival, 50),
            "output_tokens_per_s": float(out.sum() / span) if span > 0 else float("nan")}


# -- one workload --------------------------------------------------------------------------
def simulate(w: Workload, records: list[EngineRecord], profile_path: Path, work_dir: Path):
    """fleetsim on the requests the engine served, at the times it received them."""
    work_dir.mkdir(parents=True, exist_ok=True)
    trace = work_dir / "trace.csv"
    with open(trace, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["timestamp", "prompt_tokens", "output_tokens"])
        for r in sorted(records, key=lambda r: r.arrival_s):
            out.writerow([f"{r.arrival_s:.6f}", r.prompt_tokens, r.output_tokens])
    raw = copy.deepcopy(w.raw)
    (stream_name, stream), = raw["workload"]["streams"].items()
    for key in ("arrival", "prompt_tokens", "output_tokens", "start", "end"):
        stream.pop(key, None)
    stream["arrival"] = {"type": "trace", "path": trace.name}
    pool = raw["pools"][w.pool_name]
    pool["cost_model"] = {"type": "calibrated",
                          "profile": os.path.relpath(profile_path, work_dir)}
    raw["duration"] = float(max(r.arrival_s for r in records)) + 1.0
    for key in ("hardware", "models"):       # inline profiles keep their meaning
        if key in raw and not raw[key]:
            raw.pop(key)
    scen_path = work_dir / "scenario.yaml"
    scen_path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    results = sim.run(sim.load_scenario(scen_path, allow_paths=[profile_path.parent]))
    req = results.requests
    if (req["status"] != "completed").any():
        bad = req.loc[req["status"] != "completed", "status"].value_counts().to_dict()
        raise ValidationError(f"{w.path}: the simulator did not complete every request: {bad}")
    return req


def _step_report(profile: dict, steps: list[tuple[int, object]], work: Path) -> dict:
    """Each engine step's error against the engine profile (``steps``: (replay, step)),
    written beside the requests."""
    rows = StepRows.from_steps(steps)
    signed = step_errors(profile, profile.get("engine"), rows)
    err = np.abs(signed)
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "engine_steps.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["replay", "start_s", "end_s", "num_tokens", "num_seqs", "kv_read_tokens",
                      "after_idle", "predicted_s"])
        for (replay, step), row_err, n, q, k, idle in zip(
                steps, signed, rows.num_seqs, rows.num_tokens, rows.kv_read_tokens,
                rows.after_idle):
            out.writerow([replay, f"{step.start_s:.6f}", f"{step.end_s:.6f}", int(q), int(n),
                          int(k), int(idle), f"{step.seconds * (1 + row_err):.6f}"])
    return {"points": int(len(err)), "median": round(float(np.median(err)), 4),
            "max": round(float(np.max(err)), 4),
            "busy_s": round(float(rows.seconds.sum()), 3),
            "predicted_busy_s": round(float(np.sum(rows.seconds * (1 + signed))), 3)}


def pooled_figures(runs: list[tuple]) -> dict:
    """Figures over several replays of one workload: latency percentiles over every
    replay's requests together, throughput as all output tokens over all the replays'
    spans. ``runs``: (arrival, first, finish, output_tokens) per replay."""
    cat = [np.concatenate([np.asarray(r[i], dtype=np.float64) for r in runs])
           for i in range(4)]
    out = figures(*cat)
    spans = [float(np.max(r[2]) - np.min(r[0])) for r in runs]
    tokens = float(cat[3].sum())
    out["output_tokens_per_s"] = tokens / sum(spans) if sum(spans) > 0 else float("nan")
    return out


def compare_workload(w: Workload, served: list[tuple[list[EngineRecord], list]],
                     engine_profile_path: Path, engine_fit_profile: dict, out_dir: Path,
                     wall_s: float, log) -> WorkloadResult:
    """The engine's replays of the workload against fleetsim's prediction of each (the
    same requests at the times that replay handed them over), with the engine's profile
    (``engine_fit_profile``, written at ``engine_profile_path``)."""
    name = w.scenario.name
    work = out_dir / name
    sims = [simulate(w, records, engine_profile_path, work / f"replay-{i + 1}")
            for i, (records, _) in enumerate(served)]
    measured = pooled_figures([([r.arrival_s for r in rec], [r.first_token_s for r in rec],
                                [r.finish_s for r in rec], [r.output_tokens for r in rec])
                               for rec, _ in served])
    predicted = pooled_figures([(q["arrival_s"], q["first_token_s"], q["finish_s"],
                                 q["output_tokens"]) for q in sims])
    errors = {k: (predicted[k] - measured[k]) / measured[k] if measured[k] else float("nan")
              for k in METRICS}
    step_error = {"points": 0, "median": None, "max": None}
    if w.kind == "continuous":
        steps = [(i + 1, s) for i, (_, logged) in enumerate(served) for s in logged]
        if steps:
            step_error = _step_report(engine_fit_profile, steps, work)
    records = [r for rec, _ in served for r in rec]
    with open(work / "engine_requests.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["replay", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
                      "output_tokens"])
        for i, (rec, _) in enumerate(served):
            for r in rec:
                out.writerow([i + 1, f"{r.arrival_s:.6f}", f"{r.first_token_s:.6f}",
                              f"{r.finish_s:.6f}", r.prompt_tokens, r.output_tokens])
    req = pd.concat([q.assign(replay=i + 1) for i, q in enumerate(sims)], ignore_index=True)
    req.to_csv(work / "sim_requests.csv", index=False)
    log(f"{name}: {len(served)} replays; TTFT p50 measured {measured['ttft_p50_s']:.3f} s, "
        f"predicted {predicted['ttft_p50_s']:.3f} s ({100 * errors['ttft_p50_s']:+.1f}%)")
    return WorkloadResult(name, w.kind, len(served[0][0]), measured, predicted, errors,
                          step_error, records, req, wall_s, len(served))
