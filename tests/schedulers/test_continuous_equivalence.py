"""The aggregate, fast-forwarding continuous scheduler equals a per-request
transcription of the vLLM step, request by request, in every mode."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sim
from sim.schedulers import SCHEDULERS
from sim.config.scenario import Scenario
from sim.schedulers.continuous_config import ContinuousConfig
from reference_continuous import ReferenceContinuousScheduler

TIMES = ["admitted_s", "first_token_s", "finish_s", "max_itl_s"]


def scenario(**sched) -> Scenario:
    """Heavy, bursty traffic on a small KV cache so preemption happens; the reference
    transcribes V1's synchronous step, where a finished request leaves at once (no
    extra step, whatever the default engine does)."""
    sched = {"finished_extra_step": False, **sched}
    return Scenario.model_validate({
        "name": "equivalence", "seed": 11, "duration": 40,
        "workload": {"streams": {
            "chat": {"model": "llama-3.1-8b", "arrival": {"type": "gamma", "rate": 12, "cv": 2},
                     "priority": 1,
                     "prompt_tokens": {"type": "lognormal", "mean": 900, "cv": 1.2, "max": 6000},
                     "output_tokens": {"type": "lognormal", "mean": 180, "cv": 1.0, "max": 900}},
            "short": {"model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": 6},
                      "prompt_tokens": {"type": "uniform", "low": 1, "high": 40},
                      "output_tokens": {"type": "uniform", "low": 1, "high": 30}},
            "agents": {"model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": 5},
                       "priority": 2,
                       "prefix": {"tokens": 1000, "groups": 3},
                       "prompt_tokens": {"type": "uniform", "low": 1, "high": 300},
                       "output_tokens": {"type": "uniform", "low": 1, "high": 200}},
        }},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": 2,
                        "kv_cache_bytes": "1.5GB", "block_size": 16,
                        "router": {"type": "least_outstanding"},
                        "scheduler": {"type": "continuous", **sched}}},
    })


def run_reference(scn: Scenario, monkeypatch) -> pd.DataFrame:
    with monkeypatch.context() as m:
        m.setitem(SCHEDULERS, ContinuousConfig, ReferenceContinuousScheduler)
        return sim.run(scn).requests


@pytest.mark.parametrize("sched", [
    {"chunked_prefill": True, "max_num_batched_tokens": 2048, "max_num_seqs": 64},
    {"chunked_prefill": False, "max_num_batched_tokens": 8192, "max_num_seqs": 128},
    {"chunked_prefill": True, "max_num_batched_tokens": 512, "max_num_seqs": 32},
    {"chunked_prefill": True, "max_num_batched_tokens": 2048, "max_num_seqs": 64,
     "policy": "priority"},
    {"chunked_prefill": True, "max_num_batched_tokens": 4096, "max_num_seqs": 64,
     "long_prefill_token_threshold": 256},
    {"chunked_prefill": False, "max_num_batched_tokens": 8192, "max_num_seqs": 128,
     "policy": "priority", "priority_aging": 5},
], ids=["chunked-2048", "whole-prompt", "tight-budget", "priority", "long-prefill-cap",
                                    "priority-aging"])
@pytest.mark.parametrize("exact", [False, True], ids=["fast-forward", "exact"])
def test_scheduler_matches_reference_per_request(monkeypatch, sched, exact):
    """Same admissions, first tokens, finishes (to 1e-9) and preemptions."""
    scn = scenario(exact_steps=exact, **sched)
    ours = sim.run(scn).requests
    ref = run_reference(scn, monkeypatch)
    assert ref["preemptions"].sum() > 0, "the scenario must exercise preemption"
    assert ref["cached_prompt_tokens"].sum() > 0, "and prefix-cache hits"
    pd.testing.assert_series_equal(ours["cached_prompt_tokens"], ref["cached_prompt_tokens"])
    pd.testing.assert_series_equal(ours["status"], ref["status"])
    pd.testing.assert_series_equal(ours["preemptions"], ref["preemptions"])
    pd.testing.assert_series_equal(ours["output_tokens"], ref["output_tokens"])
    for col in TIMES:
        np.testing.assert_allclose(ours[col], ref[col], rtol=1e-9, atol=0, err_msg=col)


def test_extra_step_of_a_finished_request_fast_forwards_exactly(monkeypatch):
    """With a finished request's extra step (an overlapped engine), preempting and
    prefix-caching traffic gives the same requests fast-forwarded and step by step; a
    finished request chosen to make room in its extra step leaves with all its tokens."""
    def table(exact):
        scn = scenario(exact_steps=exact, finished_extra_step=True, chunked_prefill=True,
                       max_num_batched_tokens=2048, max_num_seqs=64)
        return sim.run(scn).requests
    fast, exact = table(False), table(True)
    assert fast["preemptions"].sum() > 0
    pd.testing.assert_series_equal(fast["status"], exact["status"])
    pd.testing.assert_series_equal(fast["output_tokens"], exact["output_tokens"])
    for col in TIMES:
        np.testing.assert_allclose(fast[col], exact[col], rtol=1e-9, atol=0, err_msg=col)
    done = fast[fast.status.astype(str) == "completed"]
    assert (done.output_tokens > 0).all()


def test_fast_forward_uses_far_fewer_segments_than_steps():
    """Fast-forward is what makes long decodes cheap: many steps per segment."""
    ff = sim.run(scenario(exact_steps=False))
    exact = sim.run(scenario(exact_steps=True))
    np.testing.assert_allclose(ff.requests["finish_s"], exact.requests["finish_s"], rtol=1e-9)
    assert ff.extra["segments"] * 3 < exact.extra["segments"]
