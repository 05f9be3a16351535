"""The machine's speed during a served vLLM run, from the sentinels ``serve`` timed.

Between the engine's steps, about every half second of its step time, the serving script
times a fixed piece of the model's dense work (``serve.Sentinel``), during the
calibration grid and during the workload, with the log's clock stopped. Nothing of the
engine's own steps goes into it, so it can say, independently of what is being validated,
how fast the machine ran at each moment:

- the **reference** is the median sentinel over the calibration grid;
- each step's **local speed** is the rolling median of the sentinels nearest it (``WINDOW``
  either side, in the order they ran) over the reference: 1.25 means the machine ran that
  part of the run 25% slower than the grid on average;
- the grid's steps are timed at the reference speed (each divided by its local speed)
  before the step terms are fitted on them, and fleetsim is given the workload's speed
  (the median of its sentinels over the reference) by scaling the fitted terms;
- the workload's **spread** is the range (10th to 90th percentile) of its local speeds:
  one speed cannot stand for a workload whose machine changed speed by more than that.

A run recorded before sentinels existed has none: every speed is 1 and nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOW = 3          # sentinels either side of one in its rolling median
PHASES = ("calibration", "workload")


@dataclass(frozen=True)
class MachineSpeed:
    reference_s: float             # the calibration grid's median sentinel, seconds
    calibration: np.ndarray        # local speed of each calibration step (> 1: slower)
    workload: np.ndarray           # local speed of each workload step
    workload_factor: float         # the workload's median sentinel over the reference
    workload_spread: float         # 90th less 10th percentile of the workload's local speeds
    sentinels: dict                # how many ran in each phase

    def summary(self) -> dict:
        return {"sentinels": dict(self.sentinels),
                "reference_ms": round(1e3 * self.reference_s, 4),
                "workload_speed": round(self.workload_factor, 4),
                "workload_spread": round(self.workload_spread, 4)}


def _rolling_median(values: np.ndarray) -> np.ndarray:
    n = len(values)
    return np.array([np.median(values[max(0, i - WINDOW):min(n, i + WINDOW + 1)])
                     for i in range(n)])


def local_speed(after_step: np.ndarray, seconds: np.ndarray, num_steps: int,
                reference_s: float) -> np.ndarray:
    """Each of ``num_steps`` steps' speed: the rolling median of the sentinel that ran last
    before it (the first sentinel for steps before any), over ``reference_s``. A sentinel
    with ``after_step`` a ran after a steps had been logged."""
    if not len(seconds):
        return np.ones(num_steps)
    order = np.argsort(after_step, kind="stable")
    after, med = after_step[order], _rolling_median(seconds[order])
    pos = np.clip(np.searchsorted(after, np.arange(num_steps), side="right") - 1,
                  0, len(after) - 1)
    return med[pos] / reference_s


def machine_speed(log: dict) -> MachineSpeed | None:
    """The run's machine speed from its sentinels; None for a run without them (or with
    none during the grid or during the workload)."""
    records = log.get("sentinels") or []
    cols = {ph: (np.array([float(r["after_step"]) for r in records if r["phase"] == ph]),
                 np.array([float(r["seconds"]) for r in records if r["phase"] == ph]))
            for ph in PHASES}
    if any(not len(cols[ph][1]) for ph in PHASES):
        return None
    reference_s = float(np.median(cols["calibration"][1]))
    speeds = {ph: local_speed(*cols[ph], len(log["calibration" if ph == "calibration"
                                                else "steps"]), reference_s)
              for ph in PHASES}
    work_local = _rolling_median(cols["workload"][1]) / reference_s
    p10, p90 = np.percentile(work_local, [10, 90])
    return MachineSpeed(reference_s, speeds["calibration"], speeds["workload"],
                        float(np.median(cols["workload"][1]) / reference_s), float(p90 - p10),
                        {ph: int(len(cols[ph][1])) for ph in PHASES})
