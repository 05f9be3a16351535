"""`fleetsim check`: sizing and latency predictions against a committed baseline.

For each scenario: the replicas each pool needs to meet the SLOs (as
configured, no other options) and the scenario's own latencies as run. A
figure that moved past the tolerance, or an SLO the scenario as configured
breaks, fails the check (exit 1); ``--update`` writes the baseline anew.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import sim
from sim.config.errors import ScenarioError
from sim.config.inputs import InputFileError, read_bytes, shown
from sim.planning.size import evaluate, min_replicas
from sim.planning.slo import Slo

LATENCY_KEYS = ("ttft_p99", "tpot_p99", "e2e_p99")


def measure_scenario(path: str, slos: list[Slo], allow_paths: Iterable[str] = ()) -> dict:
    scenario = sim.load_scenario(path, allow_paths=allow_paths)
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
            change = f" ({(new - old) / old:+.1%})" if old else ""
            problems.append(f"{key}: {old:.4g} s -> {new:.4g} s{change}")
    return problems


# larger than any figure a run gives: a baseline number past it was not written by fleetsim
MAX_FIGURE = 1e15


def _number(value) -> bool:
    """None, or a finite number of sensible size and not negative (replica counts and
    latencies: a huge integer is refused before any arithmetic turns it into a float)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 <= value <= MAX_FIGURE if isinstance(value, int) else \
        math.isfinite(value) and 0 <= value <= MAX_FIGURE


def _baseline_shape_error(data) -> str | None:
    """What is wrong with a parsed baseline (naming fields, never values), or None."""
    if not isinstance(data, dict):
        return "the top level must be an object of scenario paths"
    for i, entry in enumerate(data.values()):
        where = f"entry {i + 1}"
        if not isinstance(entry, dict):
            return f"{where}: must be an object"
        pools, latency = entry.get("pools", {}), entry.get("latency_s", {})
        if not isinstance(pools, dict) or not all(
                isinstance(f, dict) and _number(f.get("required_replicas"))
                for f in pools.values()):
            return f"{where}: pools: each pool must be an object with required_replicas, " \
                   f"a number (at least 0) or null"
        if not isinstance(latency, dict) or not all(map(_number, latency.values())):
            return f"{where}: latency_s: must be an object of numbers (at least 0) or nulls"
    return None


def read_baseline(baseline: Path) -> dict:
    """The baseline's figures; {} when it does not exist yet. A file that is not a
    regular file, not UTF-8 JSON or not shaped like a baseline is a located error
    that does not quote it."""
    if not baseline.exists() and not baseline.is_symlink():
        return {}
    where = shown(baseline)
    try:
        raw = read_bytes(baseline)
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=where, field="--baseline") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScenarioError("not UTF-8 text; expected the JSON `fleetsim check --update` "
                            "writes", file=where, field="--baseline") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"not JSON ({exc.msg}); expected what `fleetsim check "
                            f"--update` writes", file=where, line=exc.lineno,
                            column=exc.colno, field="--baseline") from None
    except RecursionError:
        raise ScenarioError("not a baseline: nesting too deep", file=where,
                            field="--baseline") from None
    except ValueError:              # an integer past Python's digit limit
        raise ScenarioError("not a baseline: a number too long to read", file=where,
                            field="--baseline") from None
    problem = _baseline_shape_error(data)
    if problem is not None:
        raise ScenarioError(f"not a `fleetsim check` baseline: {problem}", file=where,
                            field="--baseline")
    return data


def is_baseline(path: Path) -> bool:
    """True if ``path`` reads as a baseline `fleetsim check --update` wrote: a JSON
    object of scenario entries, each with ``pools`` and ``latency_s``."""
    try:
        data = read_baseline(path)
    except ScenarioError:
        return False
    return bool(data) and all(isinstance(e, dict) and "pools" in e and "latency_s" in e
                              for e in data.values())


def check(paths: list[str], baseline: Path, slos: list[Slo], tolerance: float,
          update: bool, allow_paths: Iterable[str] = ()) -> tuple[int, list[str]]:
    """Measure ``paths`` and compare them with ``baseline``; with ``update``, write
    the baseline instead (the caller has checked it may be written: see
    :func:`sim.output.output_paths.check_file`)."""
    from sim.output.atomic_write import write_file
    if not update and not baseline.exists() and not baseline.is_symlink():
        raise ScenarioError("no such baseline; make it with --update (it records today's "
                            "figures)", file=shown(baseline), field="--baseline")
    stored = {} if update else read_baseline(baseline)
    current = {str(p): measure_scenario(p, slos, allow_paths) for p in paths}
    if update:
        write_file(baseline, json.dumps(current, indent=2, sort_keys=True) + "\n")
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
