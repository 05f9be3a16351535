"""SLO figures over a run's request table: each SLO's measured value and margin, the
share of requests meeting every bound (attainment) and their rate (goodput)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sim.config.slos import Slo, targets


def _within_every_bound(done: pd.DataFrame, slos: list[Slo]) -> np.ndarray:
    """Per completed request: within each latency SLO's target (a request either meets
    a latency bound or not, whatever the statistic the SLO puts on it)."""
    ok = np.ones(len(done), dtype=bool)
    for slo in slos:
        if slo.metric != "attainment":
            column = slo.metric.rsplit("_", 1)[0] + "_s"
            ok &= ~(done[column].to_numpy(dtype=np.float64) > slo.target)
    return ok


def measure(requests: pd.DataFrame, slos: list[Slo]) -> dict[str, float]:
    """Each SLO's metric over ``requests`` (latencies over completed ones, infinite when
    none completed; attainment = share of all of them completed within every latency
    bound)."""
    done = requests[requests["status"].astype(str) == "completed"]
    out: dict[str, float] = {}
    for slo in slos:
        if slo.metric == "attainment":
            ok = _within_every_bound(done, slos)
            out[slo.metric] = float(ok.sum() / len(requests)) if len(requests) else 0.0
            continue
        name, stat = slo.metric.rsplit("_", 1)
        values = done[f"{name}_s"].dropna().to_numpy()
        if len(values) == 0:
            out[slo.metric] = float("inf")
        elif stat == "mean":
            out[slo.metric] = float(values.mean())
        else:
            out[slo.metric] = float(np.percentile(values, int(stat[1:])))
    return out


def margins(measured: dict[str, float], slos: list[Slo]) -> dict[str, float]:
    """Relative margin per SLO: positive when met ((target − value) / target,
    or the reverse for attainment)."""
    out = {}
    for slo in slos:
        value = measured[slo.metric]
        if slo.higher_is_better:
            out[slo.metric] = (value - slo.target) / slo.target
        else:
            out[slo.metric] = (slo.target - value) / slo.target
    return out


def met(measured: dict[str, float], slos: list[Slo]) -> bool:
    return all(m >= 0 for m in margins(measured, slos).values())


def _verdicts(requests: pd.DataFrame, slos: list[Slo], window_s: float) -> dict:
    measured = measure(requests, slos)
    margin = margins(measured, slos)
    done = requests[requests["status"].astype(str) == "completed"]
    good = int(_within_every_bound(done, slos).sum())
    finite = {k: (v if np.isfinite(v) else None) for k, v in measured.items()}
    return {
        "met": met(measured, slos),
        "objectives": {s.metric: {"target": s.target, "measured": finite[s.metric],
                                  "met": bool(margin[s.metric] >= 0),
                                  "margin": float(margin[s.metric])
                                  if np.isfinite(margin[s.metric]) else None} for s in slos},
        "requests": int(len(requests)),
        "within_every_bound": good,
        "attainment": good / len(requests) if len(requests) else None,
        "goodput_requests_per_s": good / window_s if window_s > 0 else None,
    }


def slo_section(requests: pd.DataFrame, slos_cfg, warmup_s: float, end_s: float) -> dict:
    """summary.json's ``slo``: the verdict over every request after the warm-up and over
    each team's requests for a team with SLOs of its own. Goodput is requests completed
    within every bound per second of the measured window (warm-up to the run's end)."""
    measured = requests[requests["arrival_s"] >= warmup_s]
    window_s = end_s - warmup_s
    out = {"met": True}
    fleet = targets(slos_cfg)
    if fleet:
        out["fleet"] = _verdicts(measured, fleet, window_s)
        out["met"] = out["fleet"]["met"]
    teams = {}
    for team, block in slos_cfg.teams.items():
        mine = measured[measured["team"].astype(str) == team]
        teams[team] = _verdicts(mine, targets(block), window_s)
        out["met"] = out["met"] and teams[team]["met"]
    if teams:
        out["teams"] = teams
    return out
