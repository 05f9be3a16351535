"""Chunked prefill tuning and the longest gap between output tokens."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import sim
from sim.config.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]


def run(**sched):
    base = sim.load_scenario(ROOT / "scenarios" / "chunked-prefill.yaml")
    data = base.model_dump()
    data["pools"]["main"]["scheduler"].update(sched)
    return sim.run(Scenario.model_validate(data)).requests


def chat_gap_p99(req) -> float:
    chat = req[(req.stream == "chat") & (req.status == "completed")]
    return float(np.percentile(chat.max_itl_s.dropna(), 99))


def test_chunking_removes_decode_stalls_behind_long_prompts():
    """A 16k-token prompt run whole stalls every chat stream for its prefill
    (p99 of the longest gap between tokens > 0.3 s); chunked at 2,048 tokens
    or capped at 512 per request, the stall shrinks several-fold."""
    whole = run(chunked_prefill=False, max_num_batched_tokens=16384)
    chunked = run(chunked_prefill=True, max_num_batched_tokens=2048)
    capped = run(chunked_prefill=True, max_num_batched_tokens=8192,
                 long_prefill_token_threshold=512)
    assert chat_gap_p99(whole) > 0.3
    assert chat_gap_p99(chunked) < chat_gap_p99(whole) / 4
    assert chat_gap_p99(capped) < chat_gap_p99(whole) / 4


def test_longest_gap_bounds_the_mean_gap():
    """For every request with two or more tokens, max_itl_s >= tpot_s (the
    mean gap); single-token requests have none."""
    req = run()
    many = req[(req.output_tokens > 1) & (req.status == "completed")]
    assert (many.max_itl_s >= many.tpot_s * (1 - 1e-9)).all()
    assert req[req.output_tokens == 1].max_itl_s.isna().all()
