"""`fleetsim compare A B`: key figures side by side, with differences."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

import sim
from sim.config.errors import ScenarioError
from sim.config.inputs import InputFileError, read_bytes, shown
from sim.planning.check import MAX_FIGURE
from sim.planning.sweep import summary_row


def load_summary(path: str, allow_paths: Iterable[str] = ()) -> dict:
    """A result folder's summary.json, or a scenario run now."""
    p = Path(path)
    if p.is_dir():
        return _read_summary(p / "summary.json")
    return sim.run(sim.load_scenario(p, allow_paths=allow_paths)).summary


def _sensible(data) -> bool:
    """Every number in ``data`` finite and of sensible size (walked without recursion)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, bool) or node is None or isinstance(node, str):
            continue
        elif isinstance(node, int) and abs(node) > MAX_FIGURE:
            return False
        elif isinstance(node, float) and not (math.isfinite(node) and abs(node) <= MAX_FIGURE):
            return False            # fleetsim writes strict JSON: no NaN, no Infinity
    return True


def _read_summary(path: Path) -> dict:
    """A summary.json, as a located error that does not quote it when it is not one."""
    try:
        data = json.loads(read_bytes(path).decode("utf-8"))
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=shown(path)) from None
    except (ValueError, RecursionError):    # not UTF-8, not JSON, a number too long
        data = None
    if isinstance(data, dict) and not _sensible(data):
        data = None
    pools = data.get("pools") if isinstance(data, dict) else None
    if (not isinstance(pools, dict) or not pools
            or not all(isinstance(v, dict) for v in pools.values())
            or not isinstance(data.get("latency_s"), dict)
            or not isinstance(data.get("throughput"), dict)):
        raise ScenarioError("not a summary.json that `fleetsim run` wrote", file=shown(path))
    for figure, value in summary_row(data).items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            what = type(value).__name__
            raise ScenarioError(f"figure {figure} is a {what}, not a number: not a "
                                "summary.json that `fleetsim run` wrote", file=shown(path))
        if value < 0:
            raise ScenarioError(f"figure {figure} is {value:g}, below zero (no count, "
                                "latency, rate or cost is): not a summary.json that "
                                "`fleetsim run` wrote", file=shown(path))
    return data


def compare(a: dict, b: dict) -> pd.DataFrame:
    ra, rb = summary_row(a), summary_row(b)
    rows = []
    for key in dict.fromkeys(list(ra) + list(rb)):
        va, vb = ra.get(key), rb.get(key)
        diff = vb - va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        rel = diff / va if diff is not None and va else None
        rows.append({"figure": key, "A": va, "B": vb, "B - A": diff, "change": rel})
    return pd.DataFrame(rows)
