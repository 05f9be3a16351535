"""`fleetsim sweep`: a grid over scenario fields, one tidy row per point."""
from __future__ import annotations

import itertools
from typing import Any

import pandas as pd

from sim.api import cross_check
from sim.config.scenario import Scenario
from sim.output.spans import pool_window
from sim.config.overrides import with_varied
from sim.planning.runner import Progress, run_many

ROW_FIELDS = {
    "arrived": ("requests", "arrived"), "completed": ("requests", "completed"),
    "rejected": ("requests", "rejected_total"),
    "ttft_p50_s": ("latency_s", "ttft", "p50"), "ttft_p99_s": ("latency_s", "ttft", "p99"),
    "tpot_p50_s": ("latency_s", "tpot", "p50"), "tpot_p99_s": ("latency_s", "tpot", "p99"),
    "e2e_p50_s": ("latency_s", "e2e", "p50"), "e2e_p99_s": ("latency_s", "e2e", "p99"),
    "requests_per_s": ("throughput", "requests_per_s"),
    "output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "cost_usd": ("cost", "total_usd"),
    "usd_per_million_output_tokens": ("cost", "usd_per_million_output_tokens"),
}


def _get(summary: dict, path: tuple) -> Any:
    for key in path:
        if not isinstance(summary, dict) or key not in summary:
            return None
        summary = summary[key]
    return summary


# each pool's figures in a row, as POOL.FIELD
POOL_FIELDS = ("replicas_mean", "busy_frac", "gpu_hours", "kv_util_mean")


def rates_window(summary: dict) -> tuple[bool, float]:
    """Whether the summary's rates are over its active span (summary.json's
    ``throughput.span_s``), and the window's length; else (a summary written before
    active spans) they are over the whole run, ``end_s``."""
    span_s = (summary.get("throughput") or {}).get("span_s")
    if span_s is not None:
        return True, span_s
    return False, summary.get("end_s") or 0.0


def mean_gpus(pool: dict, window_s: float, figures: dict | None = None) -> float:
    """GPUs a pool's summary billed on average over a window of ``window_s``: the GPU-hours
    of ``figures`` (the pool's own, over the whole run, unless given: its active span's),
    which count tp x pp GPUs a replica, over the window; else its mean replicas x tp x pp."""
    figures = pool if figures is None else figures
    if figures.get("gpu_hours") is not None and window_s:
        return figures["gpu_hours"] * 3600.0 / window_s
    return (pool.get("replicas_mean") or 0.0) * (pool.get("tp") or 0) * (pool.get("pp") or 1)


def summary_row(summary: dict) -> dict:
    """One tidy row of a summary: its latencies and SLO verdict, and every other figure
    (rates, GPUs, cost, cost per hour and per token, each pool's replicas, GPU-hours,
    busy share and KV use) over one window: the active span (summary.json's
    ``throughput.span_s``; the whole run for a summary written before active spans)."""
    row = {name: _get(summary, path) for name, path in ROW_FIELDS.items()}
    pools = summary.get("pools", {})
    in_span, span_s = rates_window(summary)
    if in_span:             # the bill inside the span, as the cost per token is
        row["cost_usd"] = (summary.get("cost") or {}).get("active_span_usd")
    gpus = sum(mean_gpus(p, span_s, pool_window(p)) for p in pools.values())
    tokens_per_s, tpot = row["output_tokens_per_s"], row["tpot_p50_s"]
    # the Pareto views' axes: each GPU's share of the output, each user's token speed,
    # the cost of an hour
    row["gpus_mean"] = gpus
    row["output_tokens_per_s_per_gpu"] = tokens_per_s / gpus if tokens_per_s and gpus else None
    row["tokens_per_s_per_user"] = 1.0 / tpot if tpot else None
    cost = row["cost_usd"]
    row["cost_usd_per_h"] = cost * 3600.0 / span_s if span_s and cost is not None else None
    slo = summary.get("slo")
    if slo:             # the verdict of the scenario's slos: block, and its goodput
        row["slo_met"] = slo.get("met")
        fleet = slo.get("fleet") or {}
        row["goodput_requests_per_s"] = fleet.get("goodput_requests_per_s")
        margins = [o.get("margin") for o in (fleet.get("objectives") or {}).values()]
        # the tightest SLO's margin: below 0 where one is missed (None: one never judged)
        row["slo_margin_min"] = (min(margins) if margins and None not in margins
                                 else None)
    for pool, fig in pools.items():
        window = pool_window(fig)
        for key in POOL_FIELDS:
            row[f"{pool}.{key}"] = window.get(key)
    return row


def grid(varies: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    paths = [p for p, _ in varies]
    return [dict(zip(paths, combo)) for combo in itertools.product(*(v for _, v in varies))]


def sweep(scenario: Scenario, varies: list[tuple[str, list[Any]]], *, executor: str = "local",
          workers: int = 1, scheduler: str | None = None,
          progress: Progress | None = None) -> pd.DataFrame:
    """Run every point of the grid; the table does not depend on the executor."""
    points = grid(varies)
    # every point checked up front (before any runs), an error naming its --vary values
    scenarios = [with_varied(scenario, point, check=cross_check) for point in points]
    summaries = run_many(scenarios, executor=executor, workers=workers, scheduler=scheduler,
                         progress=progress)
    return pd.DataFrame([{**point, **summary_row(s)} for point, s in zip(points, summaries)])
