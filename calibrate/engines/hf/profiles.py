"""The step-time profile a validation runs on: this machine's (calibrated first when the
scenario's was made elsewhere), extended by the engine's fitted terms."""
from __future__ import annotations

import copy
import csv
from pathlib import Path

import yaml

from calibrate.engines.step_fit import EngineFit, step_errors
from calibrate.fitting.shapes import ModelShape
from calibrate.engines.hf.workload import Workload
from calibrate.fitting.profile_file import write_profile
from sim.cost.profile_file import load_profile, resolve_profile_path
from sim.cost.profile_schema import parse_profile


# -- profiles ----------------------------------------------------------------------------
def _made_here(data: dict, shape: ModelShape, host: str) -> bool:
    """A profile (read through its schema: ValueError if it does not) of ``shape`` made
    on this CPU, in full, at tp 1."""
    prof = parse_profile(data, "calibrated profile")
    return (prof.device == "cpu" and prof.device_name == host and not prof.quick
            and int(prof.tp) == 1
            and all(getattr(prof.model, f) is not None and int(getattr(prof.model, f)) == v
                    for f, v in shape.shape_dict().items() if f != "name"))


def host_profile(path: Path, shape: ModelShape) -> Path | None:
    """``path`` if it was made on this CPU, else a profile of the same model made on this
    CPU in a folder under ``path``'s (profiles of several CPU kinds ship side by side)."""
    from calibrate.microbench import timing
    host = timing.device_name("cpu")
    for cand in [path, *sorted(path.parent.glob(f"*/{path.name}"))]:
        try:
            if _made_here(load_profile(cand), shape, host):
                return cand
        except (OSError, ValueError, yaml.YAMLError):
            continue
    return None


def base_profile(w: Workload, out_dir: Path, recalibrate: bool, log) -> tuple[Path, dict]:
    """The scenario's calibrated profile for this CPU, else a fresh calibration."""
    from calibrate.microbench import timing
    from calibrate.microbench.run import calibrate
    path = resolve_profile_path(w.scenario.pools[w.pool_name].cost_model.profile,
                                w.path.resolve().parent)
    data = load_profile(path)
    host = timing.device_name("cpu")
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


# -- the whole validation -------------------------------------------------------------------
def write_fit_steps(profile: dict, fit: EngineFit, path: Path) -> None:
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
