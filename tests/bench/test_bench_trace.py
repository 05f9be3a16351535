"""Replaying a production trace costs about what the same number of Poisson requests does
(``make bench``; not part of ``make test``).

The whole Mooncake conversation trace (12,031 requests over one hour, prompts of 12,035
tokens on average, repeated blocks named by ``hash_ids``) on its scenario's 8 x TP2 H100
pool, against a Poisson stream at the trace's mean rate with lengths resampled from the
trace (``preset: mooncake-conversation-*``) on the same pool. Target: the trace's
simulation wall time per request at most 2x the Poisson stream's. Both runs are printed
with their counts of events and engine steps, measured in this run.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("fleetbench.py")
TRACE = ROOT / "scenarios" / "mooncake-conversation.yaml"
HOUR_S = 3600.0

pytestmark = pytest.mark.bench


def run(path: Path) -> dict:
    proc = subprocess.run([sys.executable, str(RUNNER), str(path), "--duration", str(HOUR_S)],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def poisson_twin(requests: int, folder: Path) -> Path:
    """The trace's scenario with its stream replaced by Poisson arrivals of its lengths."""
    data = yaml.safe_load(TRACE.read_text(encoding="utf-8"))
    data["name"] = "mooncake-poisson-twin"
    stream = data["workload"]["streams"]["conversation"]
    stream["arrival"] = {"type": "poisson", "rate": requests / HOUR_S}
    stream["prompt_tokens"] = {"type": "empirical", "preset": "mooncake-conversation-prompt"}
    stream["output_tokens"] = {"type": "empirical", "preset": "mooncake-conversation-output"}
    path = folder / "twin.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_trace_replay_costs_at_most_twice_poisson(tmp_path, capsys):
    trace = run(TRACE)
    poisson = run(poisson_twin(trace["requests"], tmp_path))
    rows = []
    for name, m in (("mooncake trace", trace), ("poisson, same lengths", poisson)):
        rows.append({"workload": name, "requests": m["requests"],
                     "wall_s": round(m["sim_wall_s"], 1),
                     "us_per_request": round(1e6 * m["sim_wall_s"] / m["requests"]),
                     "events": m["events"], "steps": m["steps"],
                     "busy_frac": round(m["busy_frac"], 3),
                     "peak_rss_mb": round(m["peak_rss_mb"])})
    table = pd.DataFrame(rows).set_index("workload")
    ratio = table.us_per_request.iloc[0] / table.us_per_request.iloc[1]
    with capsys.disabled():
        print("\n\nMooncake conversation trace, one hour, 8 x TP2 H100 (Llama-3.1-70B fp8)")
        print(table.to_string())
        print(f"trace / poisson, wall per request: {ratio:.2f} (target <= 2)")
    assert trace["requests"] == 12031
    assert ratio <= 2.0
