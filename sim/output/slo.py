"""SLO figures over a run's request table: each SLO's measured value and margin, the
share of requests meeting every bound (attainment) and their rate (goodput).

A table here is a run's :class:`sim.output.columns.Table` or a pandas DataFrame of the
same columns: only what both do is used (a column by name, rows by a boolean mask,
``==`` and ``isin`` on a column of names, ``np.asarray``)."""
from __future__ import annotations

import numpy as np

from sim.config.slos import Slo, targets


def within_every_bound(done, slos: list[Slo]) -> np.ndarray:
    """Per completed request: within each latency SLO's target (a request either meets
    a latency bound or not, whatever the statistic the SLO puts on it)."""
    ok = np.ones(len(done), dtype=bool)
    for slo in slos:
        if slo.metric != "attainment":
            column = slo.metric.rsplit("_", 1)[0] + "_s"
            ok &= ~(np.asarray(done[column], dtype=np.float64) > slo.target)
    return ok


# refusals by policy, not for want of capacity: a request without a valid key, or for a
# model its team may not call, says nothing about the fleet's latency
POLICY_REFUSALS = ("unauthorized", "model_not_allowed")


def judged(requests):
    """The requests an SLO is judged over: all but those refused by policy."""
    return requests[~np.asarray(requests["reject_reason"].isin(POLICY_REFUSALS))]


def _completed(requests) -> np.ndarray:
    return np.asarray(requests["status"] == "completed", dtype=bool)


def unserved(requests) -> int:
    """Requests of ``judged`` that never completed (shed, refused for capacity, unfinished
    when the run ended)."""
    return int((~_completed(requests)).sum())


def measure(requests, slos: list[Slo]) -> dict[str, float]:
    """Each SLO's metric over ``requests`` (all but the policy refusals). A request that
    never completed (shed, refused for capacity, unfinished) has an infinite latency:
    shedding load cannot meet a latency SLO. Attainment = share of them completed within
    every latency bound."""
    requests = judged(requests)
    done = requests[_completed(requests)]
    missing = len(requests) - len(done)
    out: dict[str, float] = {}
    for slo in slos:
        if slo.metric == "attainment":
            ok = within_every_bound(done, slos)
            out[slo.metric] = float(ok.sum() / len(requests)) if len(requests) else 0.0
            continue
        name, stat = slo.metric.rsplit("_", 1)
        values = np.asarray(done[f"{name}_s"], dtype=np.float64)
        values = values[~np.isnan(values)]
        if len(values) + missing == 0:
            out[slo.metric] = float("inf")
        elif stat == "mean":
            out[slo.metric] = float(values.mean()) if missing == 0 else float("inf")
        else:
            out[slo.metric] = _percentile(values, missing, int(stat[1:]))
    return out


def _percentile(values: np.ndarray, infinite: int, q: int) -> float:
    """numpy's (linear) percentile of ``values`` with ``infinite`` more values of +inf: the
    same figure while the percentile falls among the finite values, infinite past them."""
    if infinite == 0:
        return float(np.percentile(values, q))
    n = len(values) + infinite
    pos = q / 100.0 * (n - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    ordered = np.sort(values)
    if hi >= len(values):
        return float(ordered[lo]) if lo == hi == pos and lo < len(values) else float("inf")
    return float(ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo]))


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


def _verdicts(requests, slos: list[Slo], window_s: float) -> dict:
    measured = measure(requests, slos)
    margin = margins(measured, slos)
    requests = judged(requests)
    done = requests[_completed(requests)]
    good = int(within_every_bound(done, slos).sum())
    finite = {k: (v if np.isfinite(v) else None) for k, v in measured.items()}
    return {
        "met": met(measured, slos),
        "objectives": {s.metric: {"target": s.target, "measured": finite[s.metric],
                                  "met": bool(margin[s.metric] >= 0),
                                  "margin": float(margin[s.metric])
                                  if np.isfinite(margin[s.metric]) else None} for s in slos},
        "requests": int(len(requests)),
        "unserved": unserved(requests),
        "within_every_bound": good,
        "attainment": good / len(requests) if len(requests) else None,
        "goodput_requests_per_s": good / window_s if window_s > 0 else None,
    }


def slo_section(requests, slos_cfg, warmup_s: float, end_s: float) -> dict:
    """summary.json's ``slo``: the verdict over every request after the warm-up and over
    each team's (stream's) requests for a team (stream) with SLOs of its own. Goodput is
    requests completed within every bound per second of the measured window (warm-up to
    the run's end)."""
    measured = requests[np.asarray(requests["arrival_s"]) >= warmup_s]
    window_s = end_s - warmup_s
    out = {"met": True}
    fleet = targets(slos_cfg)
    if fleet:
        out["fleet"] = _verdicts(measured, fleet, window_s)
        out["met"] = out["fleet"]["met"]
    for scope, column, blocks in (("teams", "team", slos_cfg.teams),
                                  ("streams", "stream", slos_cfg.streams)):
        verdicts = {}
        for name, block in blocks.items():
            mine = measured[np.asarray(measured[column] == name, dtype=bool)]
            verdicts[name] = _verdicts(mine, targets(block), window_s)
            out["met"] = out["met"] and verdicts[name]["met"]
        if verdicts:
            out[scope] = verdicts
    return out
