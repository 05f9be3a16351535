"""Static against continuous batching on the same 1,000 requests."""
from __future__ import annotations

from pathlib import Path

import sim

ROOT = Path(__file__).resolve().parents[2]


def test_continuous_batching_multiplies_throughput_on_identical_requests():
    """Both pools get the same 1,000 requests (one trace); continuous batching
    finishes them several times faster than padded static batches of 32."""
    r = sim.run(sim.load_scenario(ROOT / "scenarios" / "batching-comparison.yaml"))
    req = r.requests
    assert (req.status == "completed").all()
    by_pool = req.groupby("pool", observed=True)
    assert by_pool.size().to_dict() == {"static": 1000, "continuous": 1000}
    tokens = by_pool.output_tokens.sum()
    assert tokens["static"] == tokens["continuous"]
    makespan = by_pool.finish_s.max()
    ratio = makespan["static"] / makespan["continuous"]
    assert ratio > 4.0
    assert req[req.pool == "static"].groupby("admitted_s").size().max() <= 32
