"""Memory over long runs (``make bench``; not part of ``make test``).

Prints, measured in this run, the RSS (and what makes it up, see
soakbench.py) over simulated time for:

* ``bench-soak-overload``: ten times one replica's capacity for an hour,
  with a bounded pool queue that sheds;
* ``bench-soak-diurnal``: a day of diurnal traffic on a pool that a target
  autoscaler resizes.

What is asserted holds by construction, with wide margins: the requests
alive never exceed the queue's bound; over the second half of a run, live
Python objects grow by under 2 % (one leaked object per request would be
tens of percent) and the RSS by at most the request table's growth plus
64 MB. The overload is also run for 20 minutes without the queue's bound,
to show that this check fails then. No time is asserted.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import sim

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("soakbench.py")
PY_BLOCKS_GROWTH = 0.02      # live Python objects, second half of a run
RSS_SLACK_MB = 64.0          # RSS growth beyond the request table's, second half

pytestmark = pytest.mark.bench


def run(scenario: str, every_s: float, *args: str) -> tuple[dict, pd.DataFrame]:
    proc = subprocess.run([sys.executable, str(RUNNER), str(ROOT / "scenarios" / scenario),
                           "--every", str(every_s), *args],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    return m, pd.DataFrame(m.pop("series"))


def shown(series: pd.DataFrame, time_unit_s: float, unit: str) -> str:
    table = series.assign(**{unit: series["sim_s"] / time_unit_s}).set_index(unit)
    cols = ["rss_mb", "tables_mb", "state_mb", "py_blocks", "recorded", "open", "queued",
            "running", "replicas"]
    return table[cols].round(1).to_string()


def second_half_growth(series: pd.DataFrame, duration_s: float) -> dict:
    """Growth from the sample at half the arrival window to the one at its end."""
    at = series.set_index("sim_s")
    half, end = at.loc[duration_s / 2], at.loc[duration_s]
    late = series[series["sim_s"] >= duration_s / 2]
    return {"rss_mb": end.rss_mb - half.rss_mb, "tables_mb": end.tables_mb - half.tables_mb,
            "py_blocks": int(late.py_blocks.max() - half.py_blocks),
            "py_blocks_frac": late.py_blocks.max() / half.py_blocks - 1.0}


def is_flat(growth: dict) -> bool:
    return (growth["py_blocks_frac"] < PY_BLOCKS_GROWTH
            and growth["rss_mb"] - growth["tables_mb"] < RSS_SLACK_MB)


def memory_lines(m: dict, growth: dict) -> str:
    return (f"  RSS: {m['loaded_rss_mb']:.0f} MB loaded, {m['after_arrivals_rss_mb']:.0f} MB "
            f"with the arrivals generated, {m['end_of_run_rss_mb']:.0f} MB at the end of the "
            f"run, peak {m['peak_rss_mb']:.0f} MB (the result tables are built after it)\n"
            f"  second half: RSS {growth['rss_mb']:+.1f} MB while the request table grew "
            f"{growth['tables_mb']:+.1f} MB ({m['row_bytes']} B a row); live Python "
            f"objects at most {growth['py_blocks']:+,} "
            f"({100 * growth['py_blocks_frac']:+.2f} %) over the mid-run count")


def test_bench_soak_overload_memory_is_bounded(capsys):
    """10x one replica's capacity for an hour, bounded queue: flat memory."""
    scenario = sim.load_scenario(ROOT / "scenarios" / "bench-soak-overload.yaml")
    pool = scenario.pools["main"]
    bound = pool.queue.capacity + pool.replicas * pool.queue.max_outstanding_per_replica
    m, series = run("bench-soak-overload.yaml", every_s=300.0)
    assert m["rejected"] > 0 and m["completed"] > 0
    assert (series["open"] <= bound).all(), series["open"].max()
    growth = second_half_growth(series, scenario.duration)
    assert is_flat(growth), growth
    # the same load for 20 minutes without the queue's bound: the check above catches it
    contrast_s = 1200.0
    u, useries = run("bench-soak-overload.yaml", 300.0, "--duration", str(contrast_s),
                     "--unbounded-queue")
    ugrowth = second_half_growth(useries, contrast_s)
    assert not is_flat(ugrowth), ugrowth
    served_per_s = m["completed"] / m["simulated_s"]
    offered_per_s = m["arrivals"] / scenario.duration
    with capsys.disabled():
        print(f"\n\nbench-soak-overload: {offered_per_s:.0f} requests/s offered to one "
              f"Llama-3.1-8B H100 replica serving {served_per_s:.1f}/s "
              f"({offered_per_s / served_per_s:.1f}x), 1 simulated hour, "
              f"{m['sim_wall_s']:.1f} s wall")
        print(f"  {m['arrivals']:,} arrivals: {m['completed']:,} completed, "
              f"{m['rejected']:,} shed ({100 * m['rejected'] / m['arrivals']:.0f} %); "
              f"open requests at most {series['open'].max()} (bound {bound})")
        print(shown(series, 60.0, "sim_min"))
        print(memory_lines(m, growth))
        print(f"  without the queue bound, {contrast_s / 60:.0f} simulated min: "
              f"{useries['queued'].iloc[-1]:,} queued at the end; second half: RSS "
              f"{ugrowth['rss_mb']:+.1f} MB (request table {ugrowth['tables_mb']:+.1f} MB), "
              f"live Python objects {ugrowth['py_blocks']:+,} "
              f"({100 * ugrowth['py_blocks_frac']:+.0f} %)")


def test_bench_soak_diurnal_memory_is_flat(capsys):
    """24 hours of diurnal load with a target autoscaler: flat memory."""
    scenario = sim.load_scenario(ROOT / "scenarios" / "bench-soak-diurnal.yaml")
    m, series = run("bench-soak-diurnal.yaml", every_s=3600.0)
    assert m["completed"] > 0
    assert m["replicas_max"] > m["replicas_min"]       # the autoscaler did resize the pool
    growth = second_half_growth(series, scenario.duration)
    assert is_flat(growth), growth
    with capsys.disabled():
        print(f"\n\nbench-soak-diurnal: 24 simulated hours, {m['arrivals']:,} requests "
              f"({m['completed']:,} completed), replicas {m['replicas_min']} to "
              f"{m['replicas_max']}, TTFT p99 {m['ttft_p99_s']:.2f} s, "
              f"{m['sim_wall_s']:.1f} s wall")
        print(shown(series, 3600.0, "sim_h"))
        print(memory_lines(m, growth))
