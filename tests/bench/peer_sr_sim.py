"""Run vllm-sr-sim (the request-level fleet simulator on PyPI, package ``fleet_sim``) on
one request list and print its timings and metrics as JSON; run by the peer comparison
(tests/bench/test_bench_peers.py) with the peer's own interpreter (``make peers``:
.venv-peers/bin/python), never fleetsim's:

    .venv-peers/bin/python tests/bench/peer_sr_sim.py LIST.csv.gz --replicas 16

The fleet is the one scenarios/bench-peer.yaml gives fleetsim, as near as vllm-sr-sim
describes one: a single pool of ``--replicas`` instances of Llama-2-70B at TP2 on A100
SXM 80 GB (its ``ComputedProfile`` from its hardware and model catalogs; its catalog has
Llama-3.1-70B, whose layers Llama-2-70B shares, so the vocabulary and context are set to
Llama-2-70B's: 32,000 tokens and 4,096), each new request sent to the instance with the
fewest active and queued requests (``least_loaded``, as fleetsim's least_outstanding).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_requests import CONTEXT_TOKENS, read_requests  # noqa: E402  (numpy only)

import fleet_sim  # noqa: E402
from fleet_sim import Fleet, FleetConfig, PoolConfig, Request  # noqa: E402
from fleet_sim.gpu_profiles import ProfileBuilder, ServingConfig  # noqa: E402

LLAMA_2_70B = dataclasses.replace(fleet_sim.LLAMA_3_1_70B, name="llama-2-70b",
                                  aliases=(), vocab_size=32000, max_position=CONTEXT_TOKENS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("requests", help="a list written by tests/bench/peer_requests.py")
    ap.add_argument("--replicas", type=int, required=True)
    args = ap.parse_args()

    t0 = time.perf_counter()
    rows = read_requests(Path(args.requests))
    arrivals = [(t, Request(req_id=i, arrival_time=t, l_in=p, l_out=o))
                for i, (t, p, o) in enumerate(rows)]
    profile = ProfileBuilder().build(hw=fleet_sim.A100_SXM, model=LLAMA_2_70B,
                                     cfg=ServingConfig(tp=2))
    config = FleetConfig(pools=[PoolConfig(pool_id="main", gpu=profile, n_gpus=args.replicas,
                                           max_ctx=CONTEXT_TOKENS, lb_strategy="least_loaded")],
                         router_type="RandomRouter")
    t1 = time.perf_counter()
    result = Fleet(config).run(arrivals)
    t2 = time.perf_counter()

    done = result.completed
    ttft_s = [r.ttft for r in done if r.ttft is not None]
    span_s = max(r.end_time for r in done) - min(r.arrival_time for r in done)
    print(json.dumps({
        "peer": f"vllm-sr-sim {fleet_sim.__version__}",
        "requests": len(rows),
        "completed": len(done),
        "read_s": t1 - t0,
        "sim_s": t2 - t1,
        "ttft_mean_s": sum(ttft_s) / len(ttft_s),
        "requests_per_s": len(done) / span_s,
        "output_tokens_per_s": sum(r.l_out for r in done) / span_s,
        "slots_per_replica": profile.n_slots(CONTEXT_TOKENS),
    }))


if __name__ == "__main__":
    main()
