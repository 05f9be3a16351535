"""Simulation speed at fleet scale (``make bench``; not part of ``make test``).

Prints, measured in this run: simulated requests per wall second, SimPy
events, peak RSS, for bench-fleet at 8, 64 and 512 replicas (load scaled
with replicas), and the fast-forward speed-up over ``exact_steps`` on
decode-heavy traffic, whose per-request results must be identical.
Targets are printed beside the measurements, and a missed one fails the benchmark (after
the figures are printed).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("fleetbench.py")
RATE_PER_REPLICA = 525.0 / 64    # bench-fleet.yaml: 525/s over 64 replicas (~70% load)

pytestmark = pytest.mark.bench


def run(scenario: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(RUNNER), str(ROOT / "scenarios" / scenario),
                           *args], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bench_fleet_scaling(capsys):
    """bench-fleet at 8, 64 and 512 replicas: cost per request stays flat."""
    rows = []
    for replicas, duration in ((8, 3600.0), (64, 3600.0), (512, 600.0)):
        m = run("bench-fleet.yaml", "--replicas", str(replicas),
                "--rate", str(RATE_PER_REPLICA * replicas), "--duration", str(duration))
        rows.append({"replicas": replicas, "simulated_s": round(m["simulated_s"]),
                     "requests": m["requests"], "wall_s": round(m["sim_wall_s"], 1),
                     "with_tables_s": round(m["total_wall_s"], 1),
                     "requests_per_wall_s": round(m["requests_per_wall_s"]),
                     "us_per_request": round(1e6 * m["sim_wall_s"] / m["requests"], 1),
                     "events": m["events"], "events_per_request": round(m["events"] / m["requests"], 2),
                     "steps": m["steps"], "peak_rss_mb": round(m["peak_rss_mb"]),
                     "busy_frac": round(m["busy_frac"], 3)})
        assert m["requests"] > 0
    table = pd.DataFrame(rows).set_index("replicas")
    # the roofline beside the default path, on the same requests (64 replicas, 1 hour)
    roof = run("bench-fleet.yaml", "--replicas", "64", "--rate", str(RATE_PER_REPLICA * 64),
               "--duration", "3600", "--cost-model", "roofline")
    with capsys.disabled():
        print("\n\nbench-fleet: Llama-3.1-70B TP4 on H100, ~70% load, chat lengths; the "
              "default cost model (measured kernels)")
        print(table.to_string())
        print(f"the roofline, 64 replicas: {roof['sim_wall_s']:.1f} s wall for "
              f"{roof['requests']:,} requests ({1e6 * roof['sim_wall_s'] / roof['requests']:.1f}"
              f" us a request); the default path takes x"
              f"{table.loc[64].wall_s / roof['sim_wall_s']:.2f} its time")
        at64, at512 = table.loc[64], table.loc[512]
        print("wall_s: the simulation (sim.run's event loop and set-up); with_tables_s: "
              "all of sim.run, the result tables and summary included")
        print(f"\n64 replicas, 1 simulated hour: {at64.wall_s} s wall, {at64.with_tables_s} s "
              f"with the tables (target < 60 s), "
              f"peak RSS {at64.peak_rss_mb} MB (target < 2048 MB)")
        print(f"512 replicas: {at512.requests_per_wall_s} simulated requests per wall second "
              f"(target >= 20,000)")
    missed = [what for what, ok in (
        ("64 replicas x 1 h under 60 s", at64.wall_s < 60),
        ("peak RSS under 2 GiB", table.peak_rss_mb.max() < 2048),
        ("512 replicas at 20,000 requests per wall second", at512.requests_per_wall_s >= 20_000))
        if not ok]
    assert not missed, f"targets missed: {', '.join(missed)}"


def test_bench_fast_forward_speedup(capsys, tmp_path):
    """Decode-heavy traffic: fast-forward vs exact_steps, identical results."""
    ff_table, exact_table = tmp_path / "ff.parquet", tmp_path / "exact.parquet"
    ff = run("bench-decode-heavy.yaml", "--save", str(ff_table))
    exact = run("bench-decode-heavy.yaml", "--exact", "--save", str(exact_table))
    a, b = pd.read_parquet(ff_table), pd.read_parquet(exact_table)
    assert len(a) == len(b) > 0
    assert (a["status"] == b["status"]).all()
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9, atol=0)
    speedup = exact["sim_wall_s"] / ff["sim_wall_s"]
    with capsys.disabled():
        print(f"\n\nbench-decode-heavy ({ff['requests']} requests x 4,000 output tokens, "
              f"{ff['steps']:,} engine steps):")
        print(f"  exact_steps: {exact['sim_wall_s']:.2f} s wall, {exact['events']:,} events")
        print(f"  fast-forward: {ff['sim_wall_s']:.3f} s wall, {ff['events']:,} events, "
              f"{ff['segments']:,} segments")
        print(f"  speed-up {speedup:.0f}x (target >= 10x), per-request results equal to 1e-9")
    assert speedup >= 10, f"fast-forward {speedup:.1f}x faster than exact_steps (target 10x)"
