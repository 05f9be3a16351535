"""`fleetsim compare A B`: key figures side by side, with differences."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

import sim
from sim.planning.sweep import summary_row


def load_summary(path: str) -> dict:
    """A result folder's summary.json, or a scenario run now."""
    p = Path(path)
    if p.is_dir():
        return json.loads((p / "summary.json").read_text())
    return sim.run(sim.load_scenario(p)).summary


def compare(a: dict, b: dict) -> pd.DataFrame:
    ra, rb = summary_row(a), summary_row(b)
    rows = []
    for key in dict.fromkeys(list(ra) + list(rb)):
        va, vb = ra.get(key), rb.get(key)
        diff = vb - va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        rel = diff / va if diff is not None and va else None
        rows.append({"figure": key, "A": va, "B": vb, "B - A": diff, "change": rel})
    return pd.DataFrame(rows)
