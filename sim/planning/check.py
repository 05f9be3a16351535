"""`fleetsim check`: sizing and latency predictions against a committed baseline.

For each scenario: the replicas each pool needs to meet the SLOs (as
configured, no other options) and the scenario's own latencies as run. A
figure that moved past the tolerance, or an SLO the scenario as configured
breaks, fails the check (exit 1); ``--update`` writes the baseline anew.
"""
from __future__ import annotations

import json
from pathlib import Path

import sim
from sim.planning.size import evaluate, min_replicas
from sim.planning.slo import Slo

LATENCY_KEYS = ("ttft_p99", "tpot_p99", "e2e_p99")


def measure_scenario(path: str, slos: list[Slo]) -> dict:
    scenario = sim.load_scenario(path)
    out: dict = {"pools": {}, "latency_s": {}, "slo_met": True}
    summary = sim.run(scenario).summary
    for key in LATENCY_KEYS:
        name, stat = key.split("_")
        out["latency_s"][key] = summary["latency_s"][name][stat]
    for pool, cfg in scenario.pools.items():
        option = {"hardware": cfg.hardware, "tp": cfg.tp, "weight_dtype": cfg.weight_dtype}
        cap = cfg.sizing.max_replicas if cfg.sizing else 64
        need, _ = min_replicas(scenario, pool, slos, option, cap)
        _, ok, _ = evaluate(scenario, pool, slos)
        out["pools"][pool] = {"required_replicas": need, "slo_met_as_configured": ok}
        out["slo_met"] &= ok
    return out


def drift(base: dict, now: dict, tolerance: float) -> list[str]:
    problems = []
    for pool, fig in now["pools"].items():
        old = base.get("pools", {}).get(pool, {}).get("required_replicas")
        new = fig["required_replicas"]
        if old != new:
            problems.append(f"pool {pool}: required replicas {old} -> {new}")
        if not fig["slo_met_as_configured"]:
            problems.append(f"pool {pool}: breaks the SLOs as configured")
    for key, new in now["latency_s"].items():
        old = base.get("latency_s", {}).get(key)
        if old is None or new is None:
            if old != new:
                problems.append(f"{key}: {old} -> {new}")
        elif abs(new - old) > tolerance * abs(old):
            problems.append(f"{key}: {old:.4g} s -> {new:.4g} s ({(new - old) / old:+.1%})")
    return problems


def check(paths: list[str], baseline: Path, slos: list[Slo], tolerance: float,
          update: bool) -> tuple[int, list[str]]:
    stored = json.loads(baseline.read_text()) if baseline.exists() else {}
    current = {str(p): measure_scenario(p, slos) for p in paths}
    if update:
        baseline.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        return 0, [f"wrote {baseline} ({len(current)} scenarios)"]
    lines, failed = [], False
    for path, now in current.items():
        if path not in stored:
            lines.append(f"{path}: not in the baseline (run with --update)")
            failed = True
            continue
        problems = drift(stored[path], now, tolerance)
        failed |= bool(problems)
        lines += [f"{path}: {p}" for p in problems] or [f"{path}: ok"]
    return (1 if failed else 0), lines
