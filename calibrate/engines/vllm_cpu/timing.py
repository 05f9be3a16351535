"""Timing against vLLM: its step terms fitted on the calibration grid it served (never on
the workload), written into a profile for the ``vllm`` engine on this CPU, and fleetsim
with that profile against what vLLM measured on the workload.

A run whose log has sentinels (``calibrate.engines.vllm_cpu.sentinel``) may be normalised for the
machine's speed: where the grid's held-back steps fit at least as close so, the grid's
steps are fitted at the grid's reference speed and fleetsim runs the workload at the speed
its sentinels measured."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import yaml

import sim
from calibrate.engines.hf import engine_profile, figures
from calibrate.engines.records import ContinuousLimits, EngineStep
from calibrate.engines.step_fit import (StepRows, fit_continuous, predicted_seconds,
                                        scaled_engine)
from calibrate.engines.vllm_cpu import schedule as vllm_schedule
from calibrate.engines.vllm_cpu.run_folder import PLAN_NAME, VllmError, log_file
from calibrate.engines.vllm_cpu.sentinel import MachineSpeed, machine_speed
from calibrate.engines.vllm_cpu.targets import TIMING_TARGETS
from sim.config.errors import ScenarioError


def _engine_step(st: dict, idle_before_s: float, speed: float = 1.0):
    """A logged vLLM step as the fit reads it: (new tokens, context, is prefill) per
    sequence; a sequence decodes when it computes its one last known token past its
    prompt. Its time divided by ``speed`` (the machine's, against the reference)."""
    seqs = tuple((int(q["new"]), int(q["computed"]),
                  not (q["new"] == 1 and q["computed"] == q["known"] - 1
                       and q["computed"] >= q["prompt"])) for q in st["seqs"])
    start = float(st["start_s"])
    return EngineStep(start, start + (float(st["end_s"]) - start) / speed, seqs,
                      idle_before_s)


def _calibration_steps(log: dict, speed: MachineSpeed | None = None) -> list:
    """The calibration grid's steps as the fit reads them, each tagged with its run (at
    the reference speed, given the run's ``speed``); a run's first step follows the idle
    time logged before the run (back to back with the run before, or after a pause)."""
    out, prev_end, prev_run = [], None, None
    for i, st in enumerate(log.get("calibration", ())):
        if st["run"] != prev_run:
            idle = float(st.get("idle_before_s", math.inf)) + st["start_s"]
        else:
            idle = st["start_s"] - prev_end
        local = 1.0 if speed is None else float(speed.calibration[i])
        out.append((int(st["run"]), _engine_step(st, idle, local)))
        prev_end, prev_run = st["end_s"], st["run"]
    return out


def _workload_steps(log: dict) -> list:
    """The workload's steps as the fit reads them (one group); the first follows an idle
    engine."""
    out, prev_end = [], None
    for st in log["steps"]:
        idle = math.inf if prev_end is None else st["start_s"] - prev_end
        out.append((0, _engine_step(st, idle)))
        prev_end = st["end_s"]
    return out


def workload_step_ratio(profile: dict, fit, log: dict,
                        speed: MachineSpeed | None = None) -> float | None:
    """Median over the workload's own steps of vLLM's measured time over the fit's
    prediction for that step (times the machine's speed at that step, given the run's
    ``speed``): about 1 when the machine ran the workload as the grid, normalised by the
    sentinels, says it would. Nothing is fitted on it: it says whether the timing
    comparison measures fleetsim or a change in the machine the sentinels missed."""
    steps = _workload_steps(log)
    if not steps:
        return None
    rows = StepRows.from_steps(steps)
    local = 1.0 if speed is None else speed.workload
    return float(np.median(rows.seconds / (predicted_seconds(profile, fit.engine, rows)
                                           * local)))


def timing(folder: Path, log=print, out: Path | None = None) -> dict:
    """vLLM's step terms fitted on the run's calibration grid, and fleetsim (with them)
    against vLLM's measured requests on the workload; what it writes goes under ``out``
    (default: the run's folder), and its errors name the run's folder."""
    plan_data = vllm_schedule.read_json(folder / PLAN_NAME)
    log_data = vllm_schedule.read_json(log_file(folder))
    if "profile" not in plan_data or not log_data.get("calibration"):
        raise VllmError(f"{folder}: the recorded run has no calibration grid to fit")
    e = plan_data["engine"]
    limits = ContinuousLimits(e["max_num_batched_tokens"], e["max_num_seqs"],
                              e["block_size"], e["num_blocks"])
    # vLLM's paged attention reads each sequence's own keys: the profile's per-sequence
    # attention tables hold (a packed fit held back a larger error on every workload's grid)
    speed = machine_speed(log_data)
    say = lambda m: log(f"{plan_data['scenario']}: {m}")
    fit = fit_continuous(plan_data["profile"], limits, _calibration_steps(log_data),
                         log=say, packed=False)
    sentinels = None
    if speed is not None:
        # the sentinels are used only where they explain the grid: its held-back steps
        # fitted at least as close at the reference speed as measured (nothing of the
        # workload decides it)
        normalised = fit_continuous(plan_data["profile"], limits,
                                    _calibration_steps(log_data, speed), log=say,
                                    packed=False)
        sentinels = {**speed.summary(),
                     "held_back_as_measured": fit.held_back["median"],
                     "held_back_normalised": normalised.held_back["median"],
                     "used": normalised.held_back["median"] <= fit.held_back["median"]}
        if sentinels["used"]:
            fit = normalised
        else:
            speed = None
    work = (out or folder) / "fleetsim"
    work.mkdir(parents=True, exist_ok=True)
    profile_path = work / "vllm-profile.yaml"
    # fleetsim runs the workload at the machine's speed during it (the grid's fit is at
    # the grid's reference speed)
    run_fit = fit if speed is None else dataclasses.replace(
        fit, engine=scaled_engine(fit.engine, speed.workload_factor))
    engine_profile(plan_data["profile"], run_fit, "vllm", log_data["meta"].get("vllm"),
                   limits, profile_path, version_key="vllm_version")
    raw = json.loads(json.dumps(plan_data["scenario_yaml"]))
    (name, pool), = raw["pools"].items()
    pool["cost_model"] = {"type": "calibrated", "profile": profile_path.name}
    scen_path = work / "scenario.yaml"
    scen_path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    try:
        req = sim.run(sim.load_scenario(scen_path)).requests
    except ScenarioError as exc:    # (it names the copy written under ``work``)
        raise VllmError("\n".join(
            f"{folder / PLAN_NAME}: scenario_yaml{'.' + p.field if p.field else ''}: "
            f"{p.message}" for p in exc.problems)) from None
    planned = {int(r["id"]): float(r["arrival_s"]) for r in plan_data["requests"]}
    got = sorted((int(r["id"]), r) for r in log_data["requests"])
    if any(r["finish_s"] is None for _, r in got):
        raise VllmError(f"{folder}: vLLM left requests unfinished")
    measured = figures([planned[i] for i, _ in got], [r["first_token_s"] for _, r in got],
                       [r["finish_s"] for _, r in got], [r["output_tokens"] for _, r in got])
    done = req[req["status"] == "completed"]
    predicted = figures(done["arrival_s"], done["first_token_s"], done["finish_s"],
                        done["output_tokens"])
    errors = {k: (predicted[k] - measured[k]) / measured[k] if measured[k] else math.nan
              for k in TIMING_TARGETS}
    engine = vllm_schedule.batches(log_data["steps"])
    totals = {"preemptions": (vllm_schedule.preemptions(engine),
                              int(req["preemptions"].sum())),
              "cached_tokens": (sum(int(r.get("cached_tokens", 0)) for _, r in got),
                                int(req["cached_prompt_tokens"].sum()))}
    req.to_csv(work / "sim_requests.csv", index=False)
    return {"measured": measured, "predicted": predicted, "errors": errors,
            "totals": totals, "completed": [len(got), int(len(done))],
            "fit": {"held_back_step_error": fit.held_back, "step_error": fit.all_steps,
                    "steps": len(fit.rows),
                    "workload_step_ratio": workload_step_ratio(plan_data["profile"], fit,
                                                               log_data, speed),
                    "machine": sentinels}}
