"""The timed vLLM comparison on a machine whose speed drifts: sentinels timed between the
engine's steps (``calibrate/engines/vllm_cpu/serve.py``) and the normalisation they allow
(``calibrate/engines/vllm_cpu/sentinel.py``, ``calibrate/engines/vllm_cpu/timing.py``). Nothing here needs vLLM or
times anything: the machine's drift is written into a recorded run."""
from __future__ import annotations

import gzip
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from calibrate.engines.vllm_cpu import targets as vllm_report
from calibrate.engines.vllm_cpu import sentinel as vllm_sentinel
from calibrate.engines.vllm_cpu import serve as vllm_serve
from calibrate.engines.vllm_cpu import timing as vllm_timing
from calibrate.engines.step_fit import (StepRows, fit_continuous, predicted_seconds,
                                  scaled_engine)
from calibrate.engines.records import ContinuousLimits

ROOT = Path(__file__).resolve().parents[4]
LIGHT = ROOT / "tests" / "data" / "vllm-recorded" / "vllm-light"


def _recorded() -> tuple[dict, dict]:
    plan = json.loads((LIGHT / "plan.json").read_text("utf-8"))
    log = json.loads(gzip.decompress((LIGHT / "vllm_log.json.gz").read_bytes()))
    return plan, log


def _with_drift(log: dict, grid_slow: float, work_slow: float, every: int = 10) -> dict:
    """``log`` as a machine would have logged it whose speed was ``grid_slow`` times the
    recorded one over the grid's second half and ``work_slow`` times over the workload's
    second half: those steps' durations scaled (starts kept), and a 10 ms sentinel (at the
    recorded speed) every ``every`` steps, scaled likewise."""
    out = json.loads(json.dumps(log))
    sentinels = []
    for phase, key, slow in (("calibration", "calibration", grid_slow),
                             ("workload", "steps", work_slow)):
        steps = out[key]
        half = len(steps) // 2
        for i, st in enumerate(steps):
            if i >= half:
                st["end_s"] = st["start_s"] + (st["end_s"] - st["start_s"]) * slow
            if i % every == 0:
                sentinels.append({"phase": phase, "after_step": i,
                                  "seconds": 0.010 * (slow if i >= half else 1.0)})
    out["sentinels"] = sentinels
    return out


def _timed(tmp_path: Path, plan: dict, log: dict) -> dict:
    """``vllm_timing.timing`` of ``plan`` and ``log`` written as a recorded run."""
    folder = tmp_path / "vllm-light"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(plan), "utf-8")
    (folder / "vllm_log.json").write_text(json.dumps(log), "utf-8")
    return vllm_timing.timing(folder, log=lambda _m: None)


def _limits(plan: dict) -> ContinuousLimits:
    e = plan["engine"]
    return ContinuousLimits(e["max_num_batched_tokens"], e["max_num_seqs"], e["block_size"],
                            e["num_blocks"])


def test_local_speed_follows_the_nearest_sentinels_before_each_step():
    after = np.arange(0, 100, 10)
    seconds = np.array([10, 10, 10, 10, 10, 10, 13, 13, 13, 13]) * 1e-3
    speed = vllm_sentinel.local_speed(after, seconds, 100, 0.010)
    assert speed[0] == pytest.approx(1.0) and speed[9] == pytest.approx(1.0)
    assert speed[99] == pytest.approx(1.3)          # past the last sentinel: its own
    assert 1.0 <= speed[65] <= 1.3
    # a lone outlier is a sentinel of its own, not the machine: the rolling median drops it
    spike = seconds.copy()
    spike[2] = 0.050
    assert vllm_sentinel.local_speed(after, spike, 100, 0.010)[25] == pytest.approx(1.0)


def test_a_run_without_sentinels_is_taken_as_it_was_measured():
    _, log = _recorded()
    assert "sentinels" not in log and vllm_sentinel.machine_speed(log) is None
    only_grid = {**log, "sentinels": [{"phase": "calibration", "after_step": 0,
                                       "seconds": 0.01}]}
    assert vllm_sentinel.machine_speed(only_grid) is None


def test_the_machine_s_speed_over_the_workload_and_its_range():
    _, log = _recorded()
    speed = vllm_sentinel.machine_speed(_with_drift(log, 1.0, 1.3))
    assert speed.reference_s == pytest.approx(0.010)
    assert len(speed.calibration) == len(log["calibration"])
    assert len(speed.workload) == len(log["steps"])
    assert np.allclose(speed.calibration, 1.0)
    assert speed.workload[0] == pytest.approx(1.0) and speed.workload[-1] == pytest.approx(1.3)
    assert speed.workload_factor in (pytest.approx(1.0), pytest.approx(1.3))
    assert speed.workload_spread == pytest.approx(0.3)
    steady = vllm_sentinel.machine_speed(_with_drift(log, 1.0, 1.0))
    assert steady.workload_spread == pytest.approx(0.0)


def test_scaled_engine_terms_scale_every_step_s_prediction():
    plan, log = _recorded()
    fit = fit_continuous(plan["profile"], _limits(plan), vllm_timing._calibration_steps(log),
                         log=lambda _m: None, packed=False)
    rows = StepRows.from_steps(vllm_timing._workload_steps(log))
    base = predicted_seconds(plan["profile"], fit.engine, rows)
    slow = predicted_seconds(plan["profile"], scaled_engine(fit.engine, 1.37), rows)
    assert np.allclose(slow, 1.37 * base, rtol=1e-3)


def test_the_grid_is_fitted_at_its_reference_speed_whatever_the_machine_did():
    """A grid whose second half ran 1.4 times slower, with sentinels saying so, fits the
    same step terms as the steady grid; without the sentinels the fit moves."""
    plan, log = _recorded()
    fit = lambda lg, speed: fit_continuous(
        plan["profile"], _limits(plan), vllm_timing._calibration_steps(lg, speed),
        log=lambda _m: None, packed=False)
    rows = StepRows.from_steps(vllm_timing._workload_steps(log))
    steady = predicted_seconds(plan["profile"], fit(log, None).engine, rows)
    drifted = _with_drift(log, 1.4, 1.0)
    normalised = fit(drifted, vllm_sentinel.machine_speed(drifted))
    assert np.median(np.abs(predicted_seconds(plan["profile"], normalised.engine, rows)
                            / steady - 1)) < 0.01
    raw = fit(drifted, None)
    assert np.median(predicted_seconds(plan["profile"], raw.engine, rows) / steady) > 1.05


def test_a_workload_the_machine_slowed_is_steady_once_normalised(tmp_path):
    """The workload's second half 1.3 times slower: measured against the grid's fit its
    steps are off (x1.15 at the median, as the report used to say), against the fit at the
    sentinels' speed they are not; the timing comparison runs fleetsim at the measured
    speed and says so."""
    plan, log = _recorded()
    drifted = _with_drift(log, 1.0, 1.3)
    speed = vllm_sentinel.machine_speed(drifted)
    fit = fit_continuous(plan["profile"], _limits(plan),
                         vllm_timing._calibration_steps(drifted, speed),
                         log=lambda _m: None, packed=False)
    steady = vllm_timing.workload_step_ratio(plan["profile"], fit, log)
    raw = vllm_timing.workload_step_ratio(plan["profile"], fit, drifted)
    normalised = vllm_timing.workload_step_ratio(plan["profile"], fit, drifted, speed)
    assert raw / steady > 1.1
    assert normalised / steady == pytest.approx(1.0, abs=0.02)
    t = _timed(tmp_path, plan, drifted)
    machine = t["fit"]["machine"]
    assert machine["used"] and machine["held_back_normalised"] <= machine["held_back_as_measured"]
    assert machine["workload_speed"] == pytest.approx(speed.workload_factor, rel=1e-3)
    assert machine["workload_spread"] == pytest.approx(0.3, abs=1e-3)
    assert t["fit"]["workload_step_ratio"] == pytest.approx(normalised)
    written = (tmp_path / "vllm-light" / "fleetsim" / "vllm-profile.yaml").read_text("utf-8")
    import yaml
    engine = yaml.safe_load(written)["engine"]
    assert engine["constant_s"] == pytest.approx(
        scaled_engine(fit.engine, speed.workload_factor)["constant_s"])


def _row(ratio: float, spread: float | None) -> dict:
    served = json.loads((LIGHT.parent / "equivalence.json").read_text(encoding="utf-8"))
    row = next(r for r in served if "timing" in r)
    row["timing"]["fit"]["workload_step_ratio"] = ratio
    row["timing"]["fit"]["machine"] = None if spread is None else {
        "sentinels": {"calibration": 30, "workload": 80}, "reference_ms": 9.5,
        "workload_speed": 1.2, "workload_spread": spread}
    return row


def test_the_report_says_whether_the_run_is_fit_to_publish(tmp_path):
    steady = [_row(1.03, 0.04), _row(0.97, None)]
    text = vllm_report.write_report(steady, tmp_path)
    assert "fit to publish" in text and "not fit to publish" not in text
    assert "| x1.20 (range 4%) | x1.03 |" in text and "| n/a | x0.97 |" in text
    assert not any("unsteady" in m for r in steady for m in vllm_report.missed_targets(r))
    ranging = _row(1.02, 0.18)
    text = vllm_report.write_report([ranging], tmp_path)
    assert "not fit to publish" in text and "ranged 18% within the workload" in text
    assert any("not fit to publish" in m for m in vllm_report.missed_targets(ranging))


# -- the serving loop, on a stand-in engine and clock (no vLLM) ---------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Engine:
    """Steps of 0.2 s each, one token per step for every request, until each has its
    max_tokens."""

    def __init__(self, clock: _Clock, steplog) -> None:
        self.clock, self.steplog, self.left = clock, steplog, {}

    def add_request(self, rid, prompt, params, priority=0):
        self.left[rid] = params.max_tokens

    def has_unfinished_requests(self):
        return bool(self.left)

    def step(self):
        self.clock.now += 0.2
        self.steplog.pending = {"seqs": [{"id": r} for r in self.left], "preempted": []}
        out = []
        for rid in list(self.left):
            self.left[rid] -= 1
            done = self.left[rid] == 0
            if done:
                del self.left[rid]
            out.append(types.SimpleNamespace(
                request_id=rid, outputs=[types.SimpleNamespace(token_ids=[1])],
                finished=done, num_cached_tokens=0, metrics=None))
        return out


def test_the_log_s_clock_stops_while_a_sentinel_runs(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(vllm_serve, "clock", clock)
    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)

    class Sentinel(vllm_serve.Sentinel):
        def __init__(self) -> None:            # no torch: a fixed 0.05 s of work
            self.log, self.phase, self.steps_before, self.busy_s = [], "workload", 0, 0.0

        def _work(self):
            clock.now += 0.05
            return 0.03, 0.02

    steplog = types.SimpleNamespace(pending=None)
    reqs = [{"id": "a", "arrival_s": 0.0, "max_tokens": 8, "prompt": [5]}]
    steps, records = vllm_serve._drive(_Engine(clock, steplog), steplog, reqs, None)
    sentinel = Sentinel()
    clock.now = 100.0
    with_sentinel, records2 = vllm_serve._drive(_Engine(clock, steplog), steplog, reqs,
                                                sentinel)
    # 8 steps of 0.2 s: a sentinel after every 0.5 s of steps (after the 3rd and 6th)
    assert [s["after_step"] for s in sentinel.log] == [3, 6]
    assert all(s["seconds"] == pytest.approx(0.05) for s in sentinel.log)
    assert clock.now == pytest.approx(100.0 + 8 * 0.2 + 2 * 0.05)
    # ... and the log is the run without them, step for step
    flat = lambda log: [t for s in log for t in (s["start_s"], s["end_s"])]
    assert flat(with_sentinel) == pytest.approx(flat(steps))
    assert records2["a"]["finish_s"] == pytest.approx(records["a"]["finish_s"])


def test_sentinels_that_do_not_explain_the_grid_are_not_used(tmp_path):
    """Sentinels that vary at random, the steps not with them: normalised by them, the
    grid's held-back steps fit worse, so the fit is the grid's as measured, fleetsim runs
    at the grid's speed, and the report says the sentinels were not used."""
    plan, log = _recorded()
    noisy = json.loads(json.dumps(log))
    rng = np.random.default_rng(3)
    noisy["sentinels"] = [
        {"phase": phase, "after_step": i, "seconds": float(0.010 * rng.uniform(0.6, 1.6))}
        for phase, key in (("calibration", "calibration"), ("workload", "steps"))
        for i in range(0, len(log[key]), 3)]
    t = _timed(tmp_path, plan, noisy)
    machine = t["fit"]["machine"]
    assert not machine["used"]
    assert machine["held_back_normalised"] >= machine["held_back_as_measured"]
    as_measured = fit_continuous(plan["profile"], _limits(plan),
                                 vllm_timing._calibration_steps(log), log=lambda _m: None,
                                 packed=False)
    assert t["fit"]["held_back_step_error"] == as_measured.held_back
    assert t["fit"]["workload_step_ratio"] == pytest.approx(
        vllm_timing.workload_step_ratio(plan["profile"], as_measured, log))
    row = {"workload": "vllm-light", "share_identical": 1.0, "requests": 1, "steps": 1,
           "vllm_preemptions": 0, "fleetsim_preemptions": 0, "vllm_cached_tokens": 0,
           "fleetsim_cached_tokens": 0, "mismatches": {}, "timing": t}
    assert "; not used)" in vllm_report.write_report([row], tmp_path / "r")
