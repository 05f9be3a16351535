"""KV admission: vLLM's allocate-as-you-go against TensorRT-LLM's guaranteed_no_evict.

The pool's cache is 10 blocks of 16 tokens (a 0.5 MiB-per-token model with an 80 MiB
cache). A needs 64 + 80 tokens (9 blocks by its end), B 32 + 64 (6 blocks): their
prompts fit together (4 + 2 blocks), their whole sequences do not (15 > 10), and 48
decode steps in they hold 7 + 5 blocks: one is preempted unless B waits for A.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from simfactories import KV_HEAVY_NAME, continuous, make_pool, make_scenario

CACHE = "80MiB"


def _run(trace_stream, rows, admission, **sched):
    pool = make_pool(model=KV_HEAVY_NAME, kv_cache_bytes=CACHE,
                     scheduler=continuous(kv_admission=admission, **sched))
    req = sim.run(make_scenario(stream=trace_stream(rows), pool=pool, duration=60)).requests
    return req.sort_values("request_id").reset_index(drop=True)


def test_allocate_as_you_go_admits_both_and_preempts_when_blocks_run_out(trace_stream):
    req = _run(trace_stream, [(0.0, 64, 80), (0.0, 32, 64)], "on_demand")
    assert (req["status"] == "completed").all()
    assert req["preemptions"].sum() > 0
    # both ran from the first step
    assert req["admitted_s"].max() == 0.0


def test_guaranteed_no_evict_admits_a_request_only_when_its_whole_sequence_fits(trace_stream):
    """B waits until A finishes, then runs; nothing is preempted."""
    req = _run(trace_stream, [(0.0, 64, 80), (0.0, 32, 64)], "guaranteed_no_evict")
    a, b = req.iloc[0], req.iloc[1]
    assert (req["status"] == "completed").all()
    assert req["preemptions"].sum() == 0
    assert b["admitted_s"] >= a["finish_s"]
    assert a["admitted_s"] == 0.0


def test_guaranteed_no_evict_admits_together_what_fits_together(trace_stream):
    """Two requests of 4 blocks each (8 <= 10) run side by side under either policy."""
    rows = [(0.0, 32, 32), (0.0, 32, 32)]
    strict = _run(trace_stream, rows, "guaranteed_no_evict")
    loose = _run(trace_stream, rows, "on_demand")
    assert strict["admitted_s"].max() == 0.0
    assert strict["first_token_s"].tolist() == loose["first_token_s"].tolist()
    assert strict["finish_s"].tolist() == loose["finish_s"].tolist()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(1, 100), st.integers(1, 60)),
                min_size=1, max_size=12))
def test_guaranteed_no_evict_never_preempts_and_finishes_everything(tmp_path_factory, rows):
    from simfactories import trace_stream as write_trace
    path = tmp_path_factory.mktemp("t") / "t.csv"
    stream = write_trace(path, sorted(rows))
    pool = make_pool(model=KV_HEAVY_NAME, kv_cache_bytes=CACHE,
                     scheduler=continuous(kv_admission="guaranteed_no_evict",
                                          max_num_batched_tokens=64, max_num_seqs=8))
    req = sim.run(make_scenario(stream=stream, pool=pool, duration=600)).requests
    assert req["preemptions"].sum() == 0
    assert set(req["status"].astype(str)) <= {"completed", "rejected"}
    # a rejected request is one that could never fit the whole cache
    rejected = req[req["status"].astype(str) == "rejected"]
    assert ((rejected["prompt_tokens"] + rejected["output_tokens"]) > 160).all()


def test_an_unknown_admission_policy_lists_the_choices():
    with pytest.raises(Exception, match="on_demand.*guaranteed_no_evict"):
        make_scenario(pool=make_pool(scheduler=continuous(kv_admission="greedy")))
