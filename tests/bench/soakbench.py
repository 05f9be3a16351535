"""Run one soak scenario in this process, sampling its memory, and print JSON.

Used by test_bench_soak.py in a fresh subprocess per run, so the RSS is that
run's alone:  python tests/bench/soakbench.py SCENARIO [--duration S]
[--every S] [--unbounded-queue]

Every ``--every`` simulated seconds a SimPy process (it only reads) records
one row:

* ``rss_mb``: the process RSS;
* ``tables_mb``: the rows the request and sample tables hold, the run's
  output, which grows by one row per request or sampling instant by design;
* ``state_mb``: RSS less ``tables_mb``: the interpreter, the arrivals
  generated up front, the live requests, queues, replicas and event heap,
  and the freed columns that the allocator keeps each time a table doubles;
* ``py_blocks``: live small Python objects (``sys.getallocatedblocks()``),
  which counts anything per request that outlives its request exactly,
  free of the allocator's effects;
* ``open``, ``queued``, ``running``, ``replicas``: requests not yet in a
  terminal status, waiting, running; replicas the pools have.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import psutil

import sim
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.recording.recorder import ColumnTable
from sim.output.results import collect
from sim.core.simulation import Simulation

MB = 2.0**20


def table_bytes(table: ColumnTable) -> int:
    """Bytes of the rows ``table`` holds (the resident part of its columns)."""
    return len(table) * sum(table.column(name).itemsize for name in table._dtypes)


def sample_memory(simulation: Simulation, every_s: float, rows: list[dict], t0: float):
    """SimPy process: one memory row every ``every_s`` simulated seconds."""
    env, rec, me = simulation.env, simulation.recorder, psutil.Process()
    while True:
        tables = table_bytes(rec.requests) + table_bytes(rec.samples)
        rss = me.memory_info().rss
        snaps = [pool.snapshot(env.now) for pool in simulation.pools.values()]
        rows.append({"sim_s": env.now, "wall_s": time.perf_counter() - t0,
                     "rss_mb": rss / MB, "tables_mb": tables / MB,
                     "state_mb": (rss - tables) / MB,
                     "py_blocks": sys.getallocatedblocks(),
                     "recorded": len(rec.requests), "open": simulation._open,
                     "replicas": sum(s.replicas for s in snaps),
                     "queued": sum(s.queued for s in snaps),
                     "running": sum(s.running for s in snaps)})
        yield env.timeout(every_s)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--duration", type=float, help="arrival window, s (default: the file's)")
    ap.add_argument("--every", type=float, default=300.0, help="simulated s between samples")
    ap.add_argument("--unbounded-queue", action="store_true",
                    help="drop every pool queue's capacity (for contrast)")
    args = ap.parse_args()

    me = psutil.Process()
    data = sim.load_scenario(args.scenario).model_dump()
    if args.duration:
        data["duration"] = args.duration
    if args.unbounded_queue:
        for pool in data["pools"].values():
            pool["queue"]["capacity"] = None
    scenario = Scenario.model_validate(data)
    resolved, problems = resolve(scenario)
    assert resolved is not None, problems
    loaded_mb = me.memory_info().rss / MB

    t0 = time.perf_counter()
    simulation = Simulation(resolved, Path(args.scenario).resolve().parent)
    arrivals_mb = me.memory_info().rss / MB
    rows: list[dict] = []
    simulation.env.process(sample_memory(simulation, args.every, rows, t0))
    simulation.run()
    simulation.wall_s = time.perf_counter() - t0
    end_mb = me.memory_info().rss / MB
    results = collect(simulation.account())

    rec = simulation.recorder
    counts = results.requests["status"].value_counts()
    print(json.dumps({
        "requests": len(results.requests),
        "arrivals": len(simulation.arrivals.arrival_s),
        "completed": int(counts.get("completed", 0)),
        "rejected": int(counts.get("rejected", 0)),
        "unfinished": int(counts.get("unfinished", 0)),
        "simulated_s": results.summary["end_s"],
        "sim_wall_s": simulation.wall_s,
        "events": results.extra["events"],
        "loaded_rss_mb": loaded_mb,
        "after_arrivals_rss_mb": arrivals_mb,
        "end_of_run_rss_mb": end_mb,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "replicas_min": int(results.timeseries["replicas"].min()),
        "replicas_max": int(results.timeseries["replicas"].max()),
        "ttft_p99_s": results.summary["latency_s"]["ttft"]["p99"],
        "row_bytes": table_bytes(rec.requests) // max(len(rec.requests), 1),
        "series": rows,
    }))


if __name__ == "__main__":
    main()
