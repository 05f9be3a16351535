"""Predictions against a real engine: ``fleetsim validate SCENARIO...``.

Each validation scenario is an ordinary fleetsim scenario with one stream and
one pool of ``tiny-llama`` on the ``cpu`` hardware: the stream is the
workload (arrival process, prompt and output lengths, seed), the pool the
engine's limits (``continuous``: token budget, sequence cap, block size and
KV blocks; ``single``: one request at a time).

For each scenario:

1. the scenario's requests are drawn exactly as ``fleetsim run`` draws them;
2. the real engine serves them on this machine at their arrival times
   (transformers' continuous batching for ``continuous``, plain
   ``model.generate`` one at a time for ``single``), recording each
   request's arrival, first token and finish;
3. fleetsim simulates the same requests (the arrival times the engine saw,
   replayed as a trace) with the pool's own limits and the calibrated
   profile, extended by the engine's per-step terms
   (``calibrate.engine_fit``, fitted once per engine and limits on a fixed
   grid of synthetic batches, never on the workloads);
4. the measured and predicted figures are compared.

Everything the engine measured for a workload is kept in its
``engine_log.json.gz`` (``calibrate.engine_log``): ``validate_logs`` (``fleetsim
validate --from-logs``) redoes steps 3 and 4 and the fit on a recorded run,
without the engine, and gets the same figures whatever the machine's speed.

The profile must describe this machine: when the scenario's profile was made
on another CPU (or ``recalibrate`` is asked), this machine is calibrated
first, into the output folder.
"""
from __future__ import annotations

import copy
import os
import csv
import json
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.engine_fit import (EngineFit, StepRows, continuous_steps, fit_continuous,
                                  fit_sequential, sequential_steps, step_errors)
from calibrate.engine_log import FILE_NAME as LOG_NAME
from calibrate.engine_log import EngineLog, EngineLogError, find_logs
from calibrate.records import ContinuousLimits, EngineRecord, EngineRequest
from calibrate.spec import ModelShape

# the engines, the calibration and the host's name need torch: imported where they run,
# so that a recorded run is analysed without it

# metric name -> (what, target relative error or None)
METRICS = {
    "ttft_p50_s": ("TTFT p50", 0.10),
    "ttft_p90_s": ("TTFT p90", 0.20),
    "ttft_p99_s": ("TTFT p99", None),
    "tpot_p50_s": ("TPOT p50", 0.10),
    "tpot_p90_s": ("TPOT p90", None),
    "e2e_p50_s": ("E2E p50", None),
    "output_tokens_per_s": ("output tok/s", 0.10),
}


class ValidationError(ValueError):
    """A validation scenario that cannot be validated (named, with the reason)."""


@dataclass
class Workload:
    path: Path
    raw: dict                        # the scenario as written
    scenario: object                 # sim Scenario
    pool_name: str
    kind: str                        # "continuous" or "single"
    limits: ContinuousLimits | None
    shape: ModelShape


@dataclass
class WorkloadResult:
    name: str
    kind: str
    num_requests: int
    measured: dict
    predicted: dict
    errors: dict
    step_error: dict
    engine_requests: list[EngineRecord]
    sim_requests: object             # pandas DataFrame
    wall_s: float                    # the engine's time on every replay
    replays: int = 1


@dataclass
class ValidationReport:
    results: list[WorkloadResult]
    profile_path: Path
    engine_profiles: dict[str, Path]
    fits: dict[str, EngineFit]
    out_dir: Path
    host: str | None = None               # the machine the engine ran on
    engine_version: str | None = None     # transformers' version there
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        out = []
        for r in self.results:
            for key, (what, target) in METRICS.items():
                out.append({"workload": r.name, "engine": r.kind, "metric": key,
                            "measured": r.measured[key], "predicted": r.predicted[key],
                            "rel_error": r.errors[key], "target": target,
                            "within_target": (None if target is None
                                              else bool(abs(r.errors[key]) <= target))})
        return out


# -- scenarios ---------------------------------------------------------------------------
def load_workload(path: str | Path, allow_paths: tuple[Path, ...] = ()) -> Workload:
    import sim
    from sim.config.resolve import resolve
    scenario = sim.load_scenario(path, allow_paths=allow_paths)
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    where = f"{path}"
    if len(scenario.workload.streams) != 1 or len(scenario.pools) != 1:
        raise ValidationError(f"{where}: a validation scenario has exactly one stream and one "
                              f"pool (found {len(scenario.workload.streams)} and "
                              f"{len(scenario.pools)})")
    (pool_name, pool), = scenario.pools.items()
    if pool.replicas != 1 or pool.tp != 1 or pool.autoscaler is not None:
        raise ValidationError(f"{where}: pools.{pool_name}: the engine is one replica at tp 1, "
                              f"without an autoscaler")
    if pool.cost_model.type != "calibrated":
        raise ValidationError(f"{where}: pools.{pool_name}.cost_model: validation compares the "
                              f"calibrated cost model; set {{type: calibrated, profile: ...}}")
    (stream_name, stream), = scenario.workload.streams.items()
    if stream.prefix is not None:
        raise ValidationError(f"{where}: workload.streams.{stream_name}.prefix: shared prefixes "
                              f"are not validated (the engine's prompts are random tokens)")
    if scenario.gateway.active:
        raise ValidationError(f"{where}: gateway: validation runs one engine without a gateway")
    resolved, problems = resolve(scenario)
    spec = resolved.pools[pool_name]
    sched = pool.scheduler
    if sched.type == "continuous":
        if not sched.chunked_prefill or sched.policy != "fcfs" or \
                sched.long_prefill_token_threshold is not None:
            raise ValidationError(
                f"{where}: pools.{pool_name}.scheduler: the engine schedules FCFS with chunked "
                f"prefill and no long-prefill cap")
        limits = ContinuousLimits(max_batch_tokens=sched.max_num_batched_tokens,
                                  max_requests_per_batch=sched.max_num_seqs,
                                  page_size=pool.block_size, num_blocks=spec.kv.num_blocks)
    elif sched.type == "single":
        limits = None
    else:
        raise ValidationError(f"{where}: pools.{pool_name}.scheduler.type: validation covers "
                              f"'continuous' and 'single', not '{sched.type}'")
    m = spec.model
    shape = ModelShape(name=m.name, num_layers=m.num_layers, hidden_size=m.hidden_size,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       ffn_size=m.ffn_size, vocab_size=m.vocab_size,
                       num_experts=m.num_experts, experts_per_token=m.experts_per_token,
                       max_model_len=spec.max_model_len)
    return Workload(Path(path), raw, scenario, pool_name, sched.type, limits, shape)


def draw_requests(w: Workload) -> list[EngineRequest]:
    """The scenario's requests, drawn as ``fleetsim run`` draws them."""
    from sim.workload import generate_arrivals
    workload_seq = np.random.SeedSequence(w.scenario.seed).spawn(3)[0]
    arr = generate_arrivals(w.scenario.workload, w.scenario.duration, workload_seq,
                            w.path.resolve().parent)
    return [EngineRequest(float(a), int(p), int(o))
            for a, p, o in zip(arr.arrival_s, arr.prompt_tokens, arr.output_tokens)]


# -- profiles ----------------------------------------------------------------------------
def _made_here(data: dict, shape: ModelShape, host: str) -> bool:
    model = data.get("model") or {}
    return (data.get("device") == "cpu" and data.get("device_name") == host
            and not data.get("quick") and int(data.get("tp", 1)) == 1
            and all(int(model.get(f, -1)) == v for f, v in shape.shape_dict().items()
                    if f != "name"))


def host_profile(path: Path, shape: ModelShape) -> Path | None:
    """``path`` if it was made on this CPU, else a profile of the same model made on this
    CPU in a folder under ``path``'s (profiles of several CPU kinds ship side by side)."""
    from calibrate import bench
    from sim.cost.calibrated import load_profile
    host = bench.device_name("cpu")
    for cand in [path, *sorted(path.parent.glob(f"*/{path.name}"))]:
        try:
            if _made_here(load_profile(cand), shape, host):
                return cand
        except (OSError, ValueError, yaml.YAMLError):
            continue
    return None


def base_profile(w: Workload, out_dir: Path, recalibrate: bool, log) -> tuple[Path, dict]:
    """The scenario's calibrated profile for this CPU, else a fresh calibration."""
    from calibrate import bench
    from calibrate.run import calibrate
    from sim.cost.calibrated import load_profile, resolve_profile_path
    path = resolve_profile_path(w.scenario.pools[w.pool_name].cost_model.profile,
                                w.path.resolve().parent)
    data = load_profile(path)
    host = bench.device_name("cpu")
    found = None if recalibrate else host_profile(path, w.shape)
    if found is not None:
        log(f"profile {found} (made on this CPU, {host})")
        return found, load_profile(found)
    why = ("asked to recalibrate" if recalibrate else
           f"{path} was made on {data.get('device_name')}, this CPU is {host}")
    log(f"calibrating this machine first ({why})")
    result = calibrate(w.shape, device="cpu", out=out_dir / "profile", echo=None)
    log(f"profile {result.yaml_path} in {result.elapsed_s:.0f} s")
    return result.yaml_path, result.profile


def engine_profile(base: dict, fit: EngineFit, engine_name: str, engine_version: str | None,
                   limits, path: Path, version_key: str = "transformers_version") -> dict:
    """``base`` with the fitted ``engine`` block, written to ``path``; returns it."""
    from calibrate.profile_io import write_profile
    data = copy.deepcopy(base)
    data["engine"] = {
        "name": engine_name, version_key: engine_version,
        **fit.engine,
        "limits": None if limits is None else {
            "max_batch_tokens": limits.max_batch_tokens,
            "max_requests_per_batch": limits.max_requests_per_batch,
            "page_size": limits.page_size, "num_blocks": limits.num_blocks},
        "fit_steps": len(fit.rows),
        "held_back_step_error": fit.held_back,
        "step_error": fit.all_steps,
        "step_error_without_engine_terms": fit.without_engine,
        "note": ("Seconds this engine adds to the model's step, fitted on its own steps over a "
                 "fixed grid of synthetic batches: constant + per_seq x sequences + "
                 "per_prefill_step (a step that computes prompt tokens) + keys read x "
                 "per_kv_token_s(new tokens in the step), a table interpolated linearly in "
                 "log new tokens (keys: context + new tokens over the whole batch). With "
                 "replaces_attention the per-key cost is all of the step's attention and the "
                 "profile's attention tables are not used."),
    }
    data.pop("forwards", None)
    data.pop("measured", None)
    data.pop("held_back_points", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_profile(data, path)
    return data


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
    import sim
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


def serve(w: Workload, engine, requests: list[EngineRequest], log, replay: int, replays: int
          ) -> tuple[list[EngineRecord], list]:
    """One replay of the workload on the engine: its request records and step log."""
    log(f"{w.scenario.name}: replay {replay + 1}/{replays}, {len(requests)} requests over "
        f"{requests[-1].arrival_s:.0f} s on the engine ({w.kind})")
    records = engine.run(requests)
    return records, list(getattr(engine, "steps", []) or [])


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


# -- the whole validation -------------------------------------------------------------------
def _write_fit_steps(profile: dict, fit: EngineFit, path: Path) -> None:
    """The calibration grid's steps: shape, measured and predicted seconds."""
    rows = fit.rows
    err = step_errors(profile, fit.engine, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["run", "num_tokens", "num_seqs", "kv_read_tokens", "after_idle",
                      "seconds", "predicted_s"])
        for i in range(len(rows)):
            out.writerow([int(rows.group[i]), int(rows.num_tokens[i]), int(rows.num_seqs[i]),
                          int(rows.kv_read_tokens[i]), int(rows.after_idle[i]),
                          f"{rows.seconds[i]:.6f}",
                          f"{rows.seconds[i] * (1 + err[i]):.6f}"])


def _key(w: Workload) -> str:
    if w.kind == "single":
        return "generate"
    lim = w.limits
    return (f"cb-{lim.max_batch_tokens}-{lim.max_requests_per_batch}-{lim.page_size}-"
            f"{lim.num_blocks}")


def _validate_into(workloads: list[Workload], out_dir: Path, recalibrate: bool,
                   quick_fit: bool, replays: int, log) -> ValidationReport:
    """Each workload is served ``replays`` times by one warm engine, each replay just after
    a pass over the calibration grid on that engine; the engine terms are fitted once on
    every pass. This machine's speed drifts by several percent within a minute: calibration
    spread over the same minutes as the replays sees the same drift on average, where one
    pass before one replay can catch the machine fast and serve the workload slow."""
    from calibrate import bench
    from calibrate.engine import ContinuousEngine, SequentialEngine, transformers_version
    profile_path, profile = base_profile(workloads[0], out_dir, recalibrate, log)
    threads = int(profile.get("threads") or 1)
    engines: dict[str, object] = {}
    analysed = []
    try:
        for w in workloads:
            requests = draw_requests(w)
            if not requests:
                raise ValidationError(f"{w.path}: the workload has no requests")
            key = _key(w)
            if key not in engines:
                engines[key] = (SequentialEngine(w.shape, threads=threads)
                                if w.kind == "single"
                                else ContinuousEngine(w.shape, w.limits, threads=threads))
                getattr(engines[key], "start", lambda: None)()
            engine = engines[key]
            calibration: list = []
            served = []
            wall_s = 0.0
            for replay in range(replays):
                first = 1 + max((g for g, _ in calibration), default=-1)
                calibration += (sequential_steps(engine, w.shape, quick_fit, first)
                                if w.kind == "single" else
                                continuous_steps(engine, w.limits, quick_fit, first))
                t0 = time.perf_counter()
                served.append(serve(w, engine, requests, log, replay, replays))
                wall_s += time.perf_counter() - t0
            elog = EngineLog(
                workload=w.scenario.name, kind=w.kind, engine=engine.name, limits=w.limits,
                scenario=w.raw, profile=profile, calibration=calibration, replays=served,
                meta={"host": bench.device_name("cpu"),
                      "transformers_version": transformers_version(),
                      "python": platform.python_version(), "engine_wall_s": wall_s,
                      "quick_fit": quick_fit, "profile_file": profile_path.name})
            (out_dir / w.scenario.name).mkdir(parents=True, exist_ok=True)
            elog.write(out_dir / w.scenario.name / LOG_NAME)
            analysed.append(_analyse(w, elog, out_dir, log))
    finally:
        for engine in engines.values():
            getattr(engine, "stop", lambda: None)()
    return _report(analysed, profile_path, out_dir)


def _analyse(w: Workload, elog: EngineLog, out_dir: Path, log):
    """The engine terms fitted on the log's calibration steps and the log's replays against
    fleetsim's prediction: the part of a validation that needs no engine."""
    profile = elog.profile
    fit = (fit_sequential(profile, elog.calibration, log) if w.kind == "single"
           else fit_continuous(profile, w.limits, elog.calibration, log))
    name = w.scenario.name
    folder = out_dir / "profile"
    _write_fit_steps(profile, fit, folder / f"{name}-engine-steps.csv")
    path = folder / f"{name}-engine.yaml"
    data = engine_profile(profile, fit, elog.engine, elog.meta.get("transformers_version"),
                          w.limits, path)
    result = compare_workload(w, elog.replays, path, data, out_dir,
                              float(elog.meta.get("engine_wall_s", float("nan"))), log)
    return result, fit, path, elog.meta


def _report(analysed: list, profile_path: Path, out_dir: Path) -> ValidationReport:
    metas = [m for *_, m in analysed]
    report = ValidationReport([r for r, *_ in analysed], profile_path,
                              {r.name: p for r, _, p, _ in analysed},
                              {r.name: f for r, f, _, _ in analysed}, out_dir,
                              host=metas[0].get("host"),
                              engine_version=metas[0].get("transformers_version"))
    write_report(report)
    return report


def _check_workloads(workloads: list[Workload]) -> None:
    if len({w.shape for w in workloads}) != 1:
        raise ValidationError("every validation scenario must serve the same model")
    names = [w.scenario.name for w in workloads]
    if len(set(names)) != len(names):
        raise ValidationError(f"validation scenarios need distinct names, got {names}")


def _built_in(out_dir: Path, force: bool, build) -> ValidationReport:
    """``build(tmp)`` writes a report into a temporary folder renamed to ``out_dir`` when
    complete (an existing folder is replaced only with ``force``); paths in the report
    are moved along."""
    from sim.outputs import write_folder
    built: list[ValidationReport] = []

    def write(tmp: Path) -> list[Path]:
        built.append(build(tmp))
        return [p for p in tmp.rglob("*") if p.is_file()]

    write_folder(write, out_dir, force=force)
    report = built[0]
    tmp = report.out_dir

    def moved(p: Path) -> Path:
        try:
            return out_dir / Path(p).relative_to(tmp)
        except ValueError:
            return Path(p)

    report.out_dir = out_dir
    report.profile_path = moved(report.profile_path)
    report.engine_profiles = {k: moved(v) for k, v in report.engine_profiles.items()}
    return report


def validate(paths: list[str | Path], out_dir: str | Path, *, force: bool = False,
             recalibrate: bool = False, quick_fit: bool = False, replays: int = 3,
             log=print) -> ValidationReport:
    """Validate every scenario in ``paths``; results are written to ``out_dir``, which
    appears complete or not at all (an existing folder is replaced only with ``force``)."""
    out_dir = Path(out_dir)
    if replays < 1:
        raise ValidationError(f"replays: at least 1, got {replays}")
    workloads = [load_workload(p) for p in paths]
    _check_workloads(workloads)
    profiles_named = {w.scenario.pools[w.pool_name].cost_model.profile for w in workloads}
    if len(profiles_named) != 1:
        raise ValidationError(f"every validation scenario must name the same calibrated "
                              f"profile, got {', '.join(sorted(profiles_named))}")
    return _built_in(out_dir, force, lambda tmp: _validate_into(
        workloads, tmp, recalibrate, quick_fit, replays, log))


# -- a recorded run, without the engine ------------------------------------------------------
def _safe_name(name: str, default: str) -> str:
    name = Path(str(name)).name
    ok = name and all(c.isalnum() or c in "._-" for c in name) and not name.startswith(".")
    return name if ok else default


def _logged_workload(elog: EngineLog, where: Path, profile_path: Path, work: Path) -> Workload:
    """The log's validation scenario, written into ``work`` with its pool on the log's
    profile (and, were its arrivals a trace, the recorded requests as that trace)."""
    raw = copy.deepcopy(elog.scenario)
    try:
        (pool_name, pool), = raw["pools"].items()
        (_, stream), = raw["workload"]["streams"].items()
        pool["cost_model"] = {"type": "calibrated",
                              "profile": os.path.relpath(profile_path, work)}
        if isinstance(stream.get("arrival"), dict) and stream["arrival"].get("type") == "trace":
            with open(work / "recorded-requests.csv", "w", newline="", encoding="utf-8") as fh:
                out = csv.writer(fh)
                out.writerow(["timestamp", "prompt_tokens", "output_tokens"])
                for r in sorted(elog.replays[0][0], key=lambda r: r.arrival_s):
                    out.writerow([f"{r.arrival_s:.6f}", r.prompt_tokens, r.output_tokens])
            stream["arrival"] = {"type": "trace", "path": "recorded-requests.csv"}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise EngineLogError(f"{where}: scenario: not a validation scenario (one stream, one "
                             f"pool)") from None
    path = work / "scenario-recorded.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    from sim.errors import ScenarioError
    try:
        w = load_workload(path, allow_paths=(profile_path.parent,))
    except (ScenarioError, ValidationError) as exc:
        raise EngineLogError(f"{where}: scenario: {exc}") from None
    if w.kind != elog.kind or w.limits != elog.limits:
        raise EngineLogError(f"{where}: the engine's kind and limits ({elog.kind}, "
                             f"{elog.limits}) differ from its scenario's ({w.kind}, "
                             f"{w.limits})")
    if w.scenario.name != elog.workload:
        raise EngineLogError(f"{where}: workload: the log names {elog.workload!r}, its "
                             f"scenario {w.scenario.name!r}")
    return w


def validate_logs(paths: list[str | Path], out_dir: str | Path, *, force: bool = False,
                  log=print) -> ValidationReport:
    """The fit and the comparison of ``fleetsim validate``, redone on recorded engine logs
    (files, or folders ``fleetsim validate`` wrote) with the simulator as it is now; written
    to ``out_dir`` as ``validate`` writes. No engine runs and nothing is timed."""
    out_dir = Path(out_dir)
    files = find_logs(paths)
    logs = [EngineLog.read(p) for p in files]
    if len({json.dumps(g.profile, sort_keys=True) for g in logs}) != 1:
        raise ValidationError("the logs were fitted against different calibrated profiles; "
                              "analyse them one profile at a time")
    names = [g.workload for g in logs]
    if len(set(names)) != len(names):
        raise ValidationError(f"engine logs of distinct workloads are needed, got {names}")

    def build(tmp: Path) -> ValidationReport:
        from calibrate.profile_io import write_profile
        folder = tmp / "profile"
        folder.mkdir(parents=True, exist_ok=True)
        profile_path = folder / _safe_name(logs[0].meta.get("profile_file", ""),
                                           "profile.yaml")
        write_profile(logs[0].profile, profile_path)
        workloads = []
        for where, elog in zip(files, logs):
            work = tmp / elog.workload
            work.mkdir(parents=True, exist_ok=True)
            workloads.append(_logged_workload(elog, where, profile_path, work))
            shutil.copyfile(where, work / LOG_NAME)        # the folder can be analysed again
        _check_workloads(workloads)
        analysed = []
        for where, elog, w in zip(files, logs, workloads):
            log(f"{elog.workload}: recorded run ({len(elog.replays)} replays, "
                f"{len({g for g, _ in elog.calibration})} calibration runs) from {where}")
            analysed.append(_analyse(w, elog, tmp, log))
        return _report(analysed, profile_path, tmp)

    for name in names:
        if _safe_name(name, "") != name:
            raise ValidationError(f"workload name {name!r}: letters, digits, '.', '_' and '-' "
                                  f"only (it names a folder)")
    return _built_in(out_dir, force, build)


def format_table(report: ValidationReport) -> str:
    lines = []
    head = f"{'workload':<22} {'metric':<13} {'measured':>10} {'predicted':>10} {'error':>8}  target"
    lines.append(head)
    lines.append("-" * len(head))
    for r in report.results:
        for key, (what, target) in METRICS.items():
            m, p, e = r.measured[key], r.predicted[key], r.errors[key]
            unit = "" if key.endswith("per_s") else " s"
            fmt = (lambda v: f"{v:10.1f}") if key.endswith("per_s") else (lambda v: f"{v:10.4f}")
            mark = "" if target is None else (
                f"±{100 * target:.0f}% " + ("ok" if abs(e) <= target else "MISSED"))
            lines.append(f"{r.name:<22} {what + unit:<13} {fmt(m)} {fmt(p)} "
                         f"{100 * e:+7.1f}%  {mark}")
        lines.append(f"{r.name:<22} {'served':<13} {r.num_requests:>10} requests, "
                     f"{r.replays} replay{'s' if r.replays != 1 else ''}")
        se = r.step_error
        if se["points"]:
            lines.append(f"{r.name:<22} {'step time':<13} {se['points']:>10} steps, median "
                         f"|error| {100 * se['median']:.1f}%, max {100 * se['max']:.1f}%")
    return "\n".join(lines)


def _shown(path: Path, out_dir: Path) -> str:
    """A path inside the output folder relative to it (the folder is renamed into place);
    a shipped profile relative to the profiles folder."""
    from sim.paths import data_dir
    path = Path(path).resolve()
    for base, prefix in ((out_dir.resolve(), ""), (data_dir("profiles").resolve(), "profiles/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def write_report(report: ValidationReport) -> None:
    out = report.out_dir
    rows = report.rows()
    with open(out / "validation.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "host": report.host, "python": platform.python_version(),
        "transformers_version": report.engine_version,
        "profile": _shown(report.profile_path, out),
        "engine_profiles": {k: _shown(v, out) for k, v in report.engine_profiles.items()},
        "engine_fits": {k: {"terms": f.engine, "steps": len(f.rows),
                            "held_back_step_error": f.held_back,
                            "step_error": f.all_steps,
                            "step_error_without_engine_terms": f.without_engine}
                        for k, f in report.fits.items()},
        "workloads": [{"name": r.name, "engine": r.kind, "requests": r.num_requests,
                       "replays": r.replays, "engine_wall_s": round(r.wall_s, 2),
                       "measured": r.measured,
                       "predicted": r.predicted, "rel_error": r.errors,
                       "step_error": r.step_error} for r in report.results],
    }
    (out / "validation.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    (out / "validation.txt").write_text(format_table(report) + "\n", encoding="utf-8")
    plot_ttft_cdfs(report, out / "ttft_cdf.png")


def plot_ttft_cdfs(report: ValidationReport, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(report.results)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, r in zip(axes[0], report.results):
        meas = np.sort([x.first_token_s - x.arrival_s for x in r.engine_requests])
        pred = np.sort(r.sim_requests["ttft_s"].to_numpy(dtype=np.float64))
        for data, label, style in ((meas, "engine (measured)", "-"),
                                   (pred, "fleetsim (predicted)", "--")):
            ax.step(data, np.arange(1, len(data) + 1) / len(data), style, where="post",
                    label=label)
        ax.set_xscale("log")
        ax.set_title(f"{r.name} ({r.kind})", fontsize=9)
        ax.set_xlabel("TTFT (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
