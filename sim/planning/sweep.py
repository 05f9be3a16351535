"""`fleetsim sweep`: a grid over scenario fields, one tidy row per point."""
from __future__ import annotations

import itertools
from typing import Any

import pandas as pd

from sim.config.scenario import Scenario
from sim.planning.overrides import with_varied
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


def summary_row(summary: dict) -> dict:
    row = {name: _get(summary, path) for name, path in ROW_FIELDS.items()}
    slo = summary.get("slo")
    if slo:             # the verdict of the scenario's slos: block, and its goodput
        row["slo_met"] = slo.get("met")
        fleet = slo.get("fleet") or {}
        row["goodput_requests_per_s"] = fleet.get("goodput_requests_per_s")
    for pool, fig in summary.get("pools", {}).items():
        for key in ("replicas_mean", "busy_frac", "gpu_hours", "kv_util_mean"):
            row[f"{pool}.{key}"] = fig.get(key)
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
    scenarios = [with_varied(scenario, point, whole=True) for point in points]
    summaries = run_many(scenarios, executor=executor, workers=workers, scheduler=scheduler,
                         progress=progress)
    return pd.DataFrame([{**point, **summary_row(s)} for point, s in zip(points, summaries)])
