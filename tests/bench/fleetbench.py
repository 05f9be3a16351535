"""Run one benchmark scenario in this process and print its metrics as JSON.

Used by test_bench_fleet.py in a fresh subprocess per run, so peak RSS is
that run's alone:  python tests/bench/fleetbench.py SCENARIO [--replicas N]
[--rate R] [--duration S] [--exact] [--trace LIST]
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import sim
from sim.config.scenario import Scenario


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--replicas", type=int)
    ap.add_argument("--rate", type=float, help="requests/s of the first stream")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--trace", help="the first stream replays this request list (its "
                                    "arrival must be a trace)")
    ap.add_argument("--save", help="write the request table here (parquet)")
    ap.add_argument("--cost-model", choices=("scenario", "roofline"), default="scenario",
                    help="the scenario's own cost model (the default path: measured "
                         "kernels where a profile exists) or the roofline, for comparison")
    args = ap.parse_args()

    base = sim.load_scenario(args.scenario, allow_paths=[Path(args.trace).resolve().parent]
                             if args.trace else [])
    data = base.model_dump()
    if args.duration:
        data["duration"] = args.duration
    for pool in data["pools"].values():
        if args.replicas:
            pool["replicas"] = args.replicas
        if pool["scheduler"]["type"] == "continuous":
            pool["scheduler"]["exact_steps"] = args.exact
        if args.cost_model == "roofline":
            pool["cost_model"] = {"type": "roofline"}
    if args.rate:
        stream = next(iter(data["workload"]["streams"].values()))
        stream["arrival"]["rate"] = {"type": "constant", "value": args.rate}
    if args.trace:
        stream = next(iter(data["workload"]["streams"].values()))
        stream["arrival"]["path"] = str(Path(args.trace).resolve())
    scenario = Scenario.model_validate(data)
    scenario._source, scenario._allow_paths = base._source, base._allow_paths

    t0 = time.perf_counter()
    results = sim.run(scenario)
    total_s = time.perf_counter() - t0
    if args.save:
        results.requests.to_parquet(args.save)
    n = len(results.requests)
    print(json.dumps({
        "requests": n,
        "completed": results.summary["requests"]["completed"],
        "simulated_s": results.summary["end_s"],
        "sim_wall_s": results.wall_s,
        "setup_wall_s": results.extra["setup_s"],
        "total_wall_s": total_s,
        "requests_per_wall_s": n / results.wall_s,
        "events": results.extra["events"],
        "segments": results.extra["segments"],
        "steps": results.extra["steps"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "ttft_p50_s": results.summary["latency_s"]["ttft"]["p50"],
        "ttft_mean_s": results.summary["latency_s"]["ttft"]["mean"],
        "requests_per_s": results.summary["throughput"]["requests_per_s"],
        "output_tokens_per_s": results.summary["throughput"]["output_tokens_per_s"],
        "busy_frac": next(iter(results.summary["pools"].values()))["busy_frac"],
        "cost_model": next(iter(results.summary["pools"].values())).get("cost_model"),
    }))


if __name__ == "__main__":
    main()
