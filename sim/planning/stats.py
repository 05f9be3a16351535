"""Means with 95% confidence intervals over replications (Student's t)."""
from __future__ import annotations

import math

import numpy as np
import scipy.stats


def t975(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    return float(scipy.stats.t.ppf(0.975, dof))


def mean_ci(values, floor: float | None = None) -> dict[str, float | None]:
    """{mean, ci95_low, ci95_high, half_width, n} of the finite values; ``floor`` bounds
    the interval below for a figure that cannot be lower (a latency is never negative)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    n = len(v)
    if n == 0:
        return {"mean": None, "ci95_low": None, "ci95_high": None, "half_width": None, "n": 0}
    mean = float(v.mean())
    half = float(t975(n - 1) * v.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    low = mean - half if floor is None else max(mean - half, floor)
    return {"mean": mean, "ci95_low": low, "ci95_high": mean + half,
            "half_width": half if math.isfinite(half) else None, "n": n}


def flatten(summary: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a summary as ``a.b.c`` -> value."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[path] = float(value)
    return out


# numbers of a summary that name the run rather than measure it
IDENTIFIERS = ("seed",)


def aggregate(summaries: list[dict]) -> dict[str, dict]:
    """Every figure of the summaries as a mean with its 95% CI: counts, latencies, rates
    and costs (never negative) bounded below by 0, an SLO's margin (negative when missed)
    not; the seed is no figure."""
    flat = [flatten(s) for s in summaries]
    keys = [k for k in dict.fromkeys(k for f in flat for k in f) if k not in IDENTIFIERS]
    return {k: mean_ci([f.get(k) for f in flat],
                       floor=None if k.endswith(".margin") else 0.0) for k in keys}


def slo_met_share(summaries: list[dict]) -> dict[str, float]:
    """For each SLO verdict of the summaries (overall, each scope, each objective): the
    share of replications that met it."""
    counts: dict[str, list[bool]] = {}

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "met" and isinstance(value, bool):
                    counts.setdefault(path or "slo", []).append(value)
                else:
                    walk(value, f"{path}.{key}" if path else str(key))
    for summary in summaries:
        walk(summary.get("slo") or {}, "")
    return {k: sum(v) / len(v) for k, v in counts.items()}
