"""Sizing at fleet scale (``make bench``; not part of ``make test``).

``fleetsim size scenarios/bench-size.yaml --window auto --workers 2`` is timed as a user
runs it: twelve options (three GPUs x TP 2 and 4 x bf16 and fp8) of Llama-3.1-70B at
400 requests/s, one simulated hour, answers of tens of replicas each. Target: under 10
minutes on a 2-core machine.

Its answers are then checked against an exhaustive search over the same trials: for
every option, every replica count from 1 up is tried in turn until one meets the SLOs
(each trial ended early only where an SLO is already missed for good, which is never
wrong); no estimate, bisection or flow bound is used. The two must give every option
the same count, and so the same cheapest fleet. Last, the cheapest fleet is simulated
over the whole hour the scenario runs, not the window: its verdict there is printed.

Figures measured in this run are printed with the machine's cores.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.config.overrides import with_values
from sim.planning.runner import map_tasks, scenario_from_payload, scenario_payload
from sim.planning.options import OPTION_FIELDS, option_values
from sim.planning.trial import verdict
from sim.planning.window import auto_windowed
from sim.config.slos import targets

ROOT = Path(__file__).resolve().parents[2]
FLEETSIM = ROOT / ".venv" / "bin" / "fleetsim"
SCENARIO = "scenarios/bench-size.yaml"
TARGET_S = 600.0
WORKERS = 2

pytestmark = pytest.mark.bench


def first_meeting(task) -> int | None:
    """Exhaustive search of one option: the first count from 1 up meeting the SLOs."""
    payload, option, cap = task
    scenario = scenario_from_payload(payload)
    slos = targets(scenario.slos)
    for n in range(1, cap + 1):
        trial = with_values(scenario, option_values(scenario, "fleet", option, n))
        if verdict(trial, "fleet", slos, None, give_up=True).ok:
            return n
    return None


def whole_run_verdict(task) -> tuple[bool, dict]:
    payload, option, n = task
    scenario = scenario_from_payload(payload)
    slos = targets(scenario.slos)
    one = verdict(with_values(scenario, option_values(scenario, "fleet", option, n)),
                  "fleet", slos, None)
    return one.ok, one.estimate


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    out = tmp_path_factory.mktemp("size") / "out"
    t0 = time.perf_counter()
    proc = subprocess.run([str(FLEETSIM), "size", SCENARIO, "--window", "auto", "--workers",
                           str(WORKERS), "--quiet", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    return pd.read_csv(out / "size.csv"), elapsed, proc.stdout


def test_sizing_twelve_options_at_fleet_scale_within_ten_minutes(sized, capsys):
    table, elapsed, printed = sized
    with capsys.disabled():
        print(f"\n\n{SCENARIO} on {os.cpu_count()} cores, {WORKERS} workers: "
              f"{elapsed:.0f} s (target {TARGET_S:.0f} s), "
              f"{int(table['simulations'].sum())} simulations")
        scenario = sim.load_scenario(str(ROOT / SCENARIO))
        _, window_s = auto_windowed(scenario, targets(scenario.slos), frozenset({"fleet"}))
        print(f"each trial: {window_s:g} s of arrivals after the {scenario.warmup:g} s "
              "warm-up (--window auto)")
        cols = [*OPTION_FIELDS, "replicas", "gpus", "cost_usd_per_h", "ttft_p99", "tpot_p99",
                "simulations"]
        print(table[cols].to_string(index=False))
    assert len(table) == 12
    assert elapsed <= TARGET_S


def test_sizing_gives_the_exhaustive_searchs_answers(sized, capsys):
    table = sized[0]
    scenario = sim.load_scenario(str(ROOT / SCENARIO))
    slos = targets(scenario.slos)
    short, _ = auto_windowed(scenario, slos, frozenset({"fleet"}))
    payload = scenario_payload(short)
    feasible = table[table["feasible"]]
    options = [{k: (r[k] if k in ("hardware", "weight_dtype", "kv_dtype") else int(r[k]))
                for k in OPTION_FIELDS}
               for _, r in feasible.iterrows()]
    caps = [int(r["replicas"]) + 1 for _, r in feasible.iterrows()]
    t0 = time.perf_counter()
    found = map_tasks(first_meeting, [(payload, o, c) for o, c in zip(options, caps)],
                      workers=WORKERS)
    scan_s = time.perf_counter() - t0
    fast = [int(n) for n in feasible["replicas"]]
    cheapest = feasible.iloc[0]
    t0 = time.perf_counter()
    whole = map_tasks(whole_run_verdict, [(scenario_payload(scenario), options[0], n)
                                          for n in (fast[0], fast[0] - 1)], workers=WORKERS)
    whole_s = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nexhaustive search of the {len(options)} feasible options: {scan_s:.0f} s; "
              f"counts {found} against size's {fast}")
        for n, (ok, measured) in zip((fast[0], fast[0] - 1), whole):
            print(f"cheapest ({cheapest['hardware']} tp{int(cheapest['tp'])} "
                  f"{cheapest['weight_dtype']}) x {n} over the whole hour: "
                  f"{'meets' if ok else 'misses'} the SLOs, "
                  + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in measured.items()))
        print(f"(whole-hour runs: {whole_s:.0f} s)")
    assert found == fast
