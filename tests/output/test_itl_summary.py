"""summary.json's ITL: vLLM's pooled inter-token latency percentiles beside its mean."""
from __future__ import annotations

import numpy as np
import pytest
from simfactories import make_cost_model, make_pool, make_scenario, trace_stream

import sim
from sim.cost.shape import BatchShape

PROMPT = 300


def decode_steps_s(output_tokens: int) -> np.ndarray:
    """A request alone on a replica: its gaps are its decode steps, the j-th reading
    prompt + j tokens of KV (the roofline the test pools use)."""
    j = np.arange(1, output_tokens, dtype=np.float64)
    return np.asarray(make_cost_model().step_time_s(BatchShape(
        num_tokens=np.ones_like(j), num_seqs=np.ones_like(j),
        prefill_attn_work=np.zeros_like(j), decode_kv_tokens=PROMPT + j)))


def test_itl_percentiles_are_every_gap_after_the_warm_up_pooled(tmp_path):
    """Two requests, each alone on the replica; the one arriving in the warm-up is left
    out, and the other's decode steps give the percentiles (numpy's, within the bins'
    0.5%), in milliseconds too."""
    stream = trace_stream(tmp_path / "t.csv", [(0.0, PROMPT, 40), (20.0, PROMPT, 1500)])
    s = sim.run(make_scenario(stream=stream, pool=make_pool(replicas=1), duration=120.0,
                              warmup=10.0)).summary
    gaps = decode_steps_s(1500)
    itl = s["latency_s"]["itl"]
    assert set(itl) == {"mean", "p50", "p90", "p95", "p99", "p999", "max"}
    for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
        assert itl[name] == pytest.approx(np.percentile(gaps, q), rel=0.005), name
        assert s["latency_ms"]["itl"][name] == pytest.approx(itl[name] * 1e3)
    assert itl["mean"] == pytest.approx(gaps.mean(), rel=1e-6)
    assert itl["max"] == pytest.approx(gaps.max(), rel=1e-9)
