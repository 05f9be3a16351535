"""Service-level objectives: ``ttft_p99=2s``, ``tpot_p99=50ms``, ``attainment=0.99``."""
from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.config import units
from sim.config.errors import ScenarioError

LATENCIES = ("ttft", "tpot", "e2e", "queue")
STATS = ("mean", "p50", "p90", "p99")
METRICS = [f"{m}_{s}" for m in LATENCIES for s in STATS] + ["attainment"]


@dataclass(frozen=True)
class Slo:
    metric: str
    target: float            # seconds, or a fraction for attainment

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "attainment"


def parse_slo(text: str) -> Slo:
    if "=" not in text:
        raise ScenarioError(f"--slo {text!r}: write METRIC=VALUE, e.g. ttft_p99=2s",
                            field="--slo")
    metric, value = text.split("=", 1)
    if metric not in METRICS:
        import difflib
        close = difflib.get_close_matches(metric, METRICS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ScenarioError(f"--slo: unknown metric '{metric}'; valid: {', '.join(METRICS)}"
                            f"{hint}", field="--slo")
    try:
        target = float(value) if metric == "attainment" else units.seconds(value)
    except ValueError as exc:
        raise ScenarioError(f"--slo {text!r}: {exc}", field="--slo") from None
    if metric == "attainment" and not 0 < target <= 1:
        raise ScenarioError(f"--slo {text!r}: attainment is a fraction in (0, 1]",
                            field="--slo")
    if metric != "attainment" and not 0 < target < math.inf:
        raise ScenarioError(f"--slo {text!r}: a latency target is a time greater than 0, "
                            "e.g. 2s or 50ms", field="--slo")
    return Slo(metric, target)


def measure(requests: pd.DataFrame, slos: list[Slo]) -> dict[str, float]:
    """Each SLO's metric over ``requests`` (latencies over completed ones;
    attainment = share of all arrivals completed within every latency SLO)."""
    done = requests[requests["status"].astype(str) == "completed"]
    out: dict[str, float] = {}
    for slo in slos:
        if slo.metric == "attainment":
            ok = np.ones(len(done), dtype=bool)
            for other in slos:
                if other.metric != "attainment" and other.metric.endswith(("_p50", "_p90",
                                                                           "_p99", "_mean")):
                    col = other.metric.split("_")[0] + "_s"
                    ok &= ~(done[col].to_numpy() > other.target)
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
