"""Batching schedulers (single, static, continuous) through whole simulated
runs, plus the continuous step loop on its own."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simfactories import (KV_HEAVY_NAME, continuous, lognormal, make_continuous_scheduler,
                          make_cost_model, make_pool, make_request, make_scenario,
                          poisson_stream, run_scenario, run_step, single,
                          single_service_time_s, static)
from sim import run

TERMINAL = {"completed", "rejected", "unfinished"}


def max_concurrent(starts, ends) -> int:
    """Most intervals [start, end) open at once."""
    events = sorted([(float(e), -1) for e in ends] + [(float(s), 1) for s in starts])
    open_now = most = 0
    for _, step in events:
        open_now += step
        most = max(most, open_now)
    return most


def kv_capacity_run(*, kv_dtype="bf16", chunked_prefill=False, exact_steps=False,
                    rate=20.0, duration=30.0, seed=1):
    """Requests of 4,000 tokens (3,900 prompt + 100 output) at heavy load on a
    20 GiB cache of 0.5 MiB/token KV: 2,560 blocks, room for 10 such sequences
    in bf16 (250 blocks each) and 20 in fp8."""
    return run_scenario(
        stream=poisson_stream(rate=rate, prompt_tokens=3900, output_tokens=100),
        pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes="20GiB", kv_dtype=kv_dtype,
                       scheduler=continuous(chunked_prefill=chunked_prefill,
                                            exact_steps=exact_steps)),
        duration=duration, seed=seed, record_steps=True)


def tight_kv_scenario(*, exact_steps=False, chunked_prefill=True, max_num_batched_tokens=8192,
                      kv_cache_bytes="4GiB", rate=12.0, duration=15.0, seed=3, replicas=1,
                      record_steps=True):
    """Variable lengths on a small cache (4 GiB = 8,192 tokens of 0.5 MiB/token
    KV), so running sequences outgrow it and get preempted."""
    return make_scenario(
        stream=poisson_stream(rate=rate, prompt_tokens=lognormal(1500, 1.0, max=5000),
                              output_tokens=lognormal(300, 1.0, max=2000)),
        pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes=kv_cache_bytes, replicas=replicas,
                       router={"type": "least_outstanding"},
                       scheduler=continuous(chunked_prefill=chunked_prefill,
                                            exact_steps=exact_steps,
                                            max_num_batched_tokens=max_num_batched_tokens)),
        duration=duration, seed=seed, record_steps=record_steps)


# -- KV capacity -------------------------------------------------------------------
@pytest.mark.parametrize("kv_dtype,capacity", [("bf16", 10), ("fp8", 20)])
def test_kv_capacity_caps_running_sequences(kv_dtype, capacity):
    """Without chunked prefill a whole 3,900-token prompt must get its blocks to
    start, so at most ``capacity`` 4,000-token sequences ever run together, and
    heavy load reaches that many."""
    results = kv_capacity_run(kv_dtype=kv_dtype, chunked_prefill=False)
    assert results.summary["pools"]["p"]["kv_blocks_per_replica"] == 2560 * capacity // 10
    assert results.steps["num_seqs"].max() == capacity
    assert results.summary["pools"]["p"]["max_running_seqs"] == capacity
    assert results.timeseries["running"].max() <= capacity
    assert (results.requests["status"] == "completed").all()


@pytest.mark.parametrize("kv_dtype,capacity", [("bf16", 10), ("fp8", 20)])
def test_kv_capacity_caps_decoding_sequences_with_chunked_prefill(kv_dtype, capacity):
    """With chunked prefill a partial prompt may start beside full ones, but no
    more than ``capacity`` sequences are ever past their prefill together
    (counted from first token to finish over never-preempted requests, a lower
    bound of the true count), and heavy load reaches that many."""
    d = kv_capacity_run(kv_dtype=kv_dtype, chunked_prefill=True).requests
    kept = d[d["preemptions"] == 0]
    assert max_concurrent(kept["first_token_s"], kept["finish_s"]) == capacity
    assert (d["status"] == "completed").all()


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("chunked_prefill", [False, True])
def test_kv_blocks_in_use_never_exceed_the_cache(kv_dtype, chunked_prefill):
    """At every recorded step and sample, blocks in use are within the cache."""
    results = kv_capacity_run(kv_dtype=kv_dtype, chunked_prefill=chunked_prefill)
    steps = results.steps
    assert len(steps) > 0
    assert (steps["kv_used_blocks"] >= 0).all()
    assert (steps["kv_used_blocks"] <= steps["kv_total_blocks"]).all()
    assert results.timeseries["kv_util"].between(0.0, 1.0).all()


@pytest.mark.parametrize("chunked_prefill", [False, True])
def test_steps_respect_token_budget_and_sequence_limit(chunked_prefill):
    """No step computes more than max_num_batched_tokens tokens or runs more
    than max_num_seqs sequences."""
    results = run_scenario(
        stream=poisson_stream(rate=30, prompt_tokens=lognormal(800, 1.0, max=3000),
                              output_tokens=lognormal(150, 1.0, max=1000)),
        pool=make_pool(scheduler=continuous(chunked_prefill=chunked_prefill,
                                            max_num_batched_tokens=4096, max_num_seqs=24)),
        duration=20.0, record_steps=True)
    steps = results.steps
    assert steps["num_tokens"].max() <= 4096
    assert steps["num_seqs"].max() == 24
    assert (results.requests["status"] == "completed").all()


# -- rejection and terminal statuses ---------------------------------------------------
@pytest.mark.parametrize("scheduler", [single(), static(batch_size=4), continuous()])
def test_requests_that_can_never_fit_are_rejected_with_a_reason(trace_stream, scheduler):
    """On a 1 GiB cache (2,048 tokens) with max_model_len 3,500: a 4,000-token
    request is rejected as too long for the model, a 3,000-token one as too big
    for the KV cache; both at arrival, with no output, instead of waiting
    forever. The rest, one filling the cache exactly, complete."""
    rows = [(0.0, 500, 50), (0.1, 3800, 200), (0.2, 2900, 100), (0.3, 1648, 400),
            (0.4, 200, 20)]
    results = run_scenario(
        stream=trace_stream(rows),
        pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes="1GiB", max_model_len=3500,
                       scheduler=scheduler))
    d = results.requests.set_index("request_id")
    assert list(d.index) == [0, 1, 2, 3, 4]
    assert list(d["status"].astype(str)) == ["completed", "rejected", "rejected",
                                              "completed", "completed"]
    assert d.loc[1, "reject_reason"] == "exceeds_max_model_len"
    assert d.loc[2, "reject_reason"] == "exceeds_kv_capacity"
    rejected = d[d["status"] == "rejected"]
    assert (rejected["finish_s"] == rejected["arrival_s"]).all()
    assert (rejected["output_tokens"] == 0).all()
    assert rejected["first_token_s"].isna().all()
    done = d[d["status"] == "completed"]
    assert (done["reject_reason"] == "").all()
    assert (done["output_tokens"] == done["max_output_tokens"]).all()
    assert results.summary["requests"]["rejected"] == {"exceeds_kv_capacity": 1,
                                                       "exceeds_max_model_len": 1}


@pytest.mark.parametrize("scheduler", [single(), static(batch_size=8), continuous()])
def test_every_request_ends_in_exactly_one_status_and_none_is_lost(trace_stream, scheduler):
    """A run cut short by a small drain still returns one row per arrival, each
    with one terminal status; the ones still open are ``unfinished``, and the
    completed ones have consistent times."""
    rows = [(0.02 * i, 256 + 37 * (i % 11), 500 + 150 * (i % 7)) for i in range(300)]
    results = run_scenario(stream=trace_stream(rows), pool=make_pool(scheduler=scheduler),
                           duration=10.0, drain=2.0)
    d = results.requests
    assert len(d) == len(rows)
    assert sorted(d["request_id"]) == list(range(len(rows)))
    assert set(d["status"].astype(str)) <= TERMINAL
    counts = d["status"].value_counts()
    assert counts.get("completed", 0) > 0 and counts.get("unfinished", 0) > 0
    s = results.summary["requests"]
    assert s["arrived"] == len(rows)
    assert s["completed"] + s["rejected_total"] + s["in_flight_at_end"] == len(rows)
    done = d[d["status"] == "completed"]
    assert (done["arrival_s"] <= done["admitted_s"]).all()
    assert (done["admitted_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    assert (done["finish_s"] <= 12.0 + 1e-9).all()
    assert (d.loc[d["status"] == "unfinished", "output_tokens"]
            < d.loc[d["status"] == "unfinished", "max_output_tokens"]).all()


# -- preemption ------------------------------------------------------------------------
def test_preemption_under_kv_pressure_still_completes_every_request():
    """A cache too small for the offered sequences forces preemptions, and every
    preempted request is recomputed and still produces all its output tokens."""
    results = run(tight_kv_scenario())
    d = results.requests
    assert d["preemptions"].sum() > 0
    assert (d["status"] == "completed").all()
    assert (d["output_tokens"] == d["max_output_tokens"]).all()
    assert (d["first_token_s"] <= d["finish_s"]).all()


def test_preemption_evicts_the_last_running_request_to_the_head_of_the_queue():
    """When a running request cannot get a block, the last running request is
    preempted by recompute: its blocks are freed, its computed tokens reset, and
    it goes to the head of the waiting queue; nothing is admitted that step."""
    sched = make_continuous_scheduler(num_blocks=4, block_size_tokens=16)
    a = make_request(request_id=0, prompt_tokens=30, max_output_tokens=10)
    b = make_request(request_id=1, prompt_tokens=30, max_output_tokens=10)
    c = make_request(request_id=2, prompt_tokens=5, max_output_tokens=1)
    sched.add(a)
    sched.add(b)
    run_step(sched)                                  # both prefill: 2 blocks each
    assert sched.kv.num_free_blocks == 0
    assert sched.num_running == 2 and not sched.waiting
    run_step(sched)                                  # 31 -> 32 tokens, still 2 blocks
    assert sched.kv.num_free_blocks == 0
    sched.add(c)
    seg = sched.next_segment(0.0)                    # a needs a 3rd block: b is evicted
    assert b.preemptions == 1 and b.num_computed_tokens == 0 and b.num_blocks == 0
    assert a.preemptions == 0
    assert list(sched.waiting) == [b, c]
    assert sched.num_running == 1
    assert sched.kv.num_used_blocks == 3
    assert seg.num_seqs == 1                         # only a decodes this step


def test_token_budget_counts_down_running_first_then_waiting():
    """One step schedules running requests first, then admits waiting ones
    while the token budget lasts; with chunked prefill the last prompt is cut
    to the budget, without it the prompt waits for a step it fits in whole."""
    for chunked in (True, False):
        sched = make_continuous_scheduler(max_num_batched_tokens=100,
                                          chunked_prefill=chunked, max_num_seqs=8)
        sched.add(make_request(request_id=0, prompt_tokens=10, max_output_tokens=5))
        run_step(sched)                              # prefill; now decoding
        second = make_request(request_id=1, prompt_tokens=60, max_output_tokens=5)
        third = make_request(request_id=2, prompt_tokens=60, max_output_tokens=5)
        sched.add(second)
        sched.add(third)
        seg = run_step(sched)
        assert second.num_computed_tokens == 60
        if chunked:   # 1 decode + 60 + a 39-token chunk = the whole budget
            assert seg.num_seqs == 3
            assert third.num_computed_tokens == 39 and third.num_output_tokens == 0
            assert list(sched.waiting) == []
        else:         # 1 decode + 60; the next 60 do not fit the 39 left
            assert seg.num_seqs == 2
            assert third.num_computed_tokens == 0
            assert list(sched.waiting) == [third]


# -- batching policies compared ------------------------------------------------------------
def test_continuous_beats_static_beats_single_on_throughput():
    """The same heavy traffic (Poisson 20/s, 512-token prompts, ~200-token
    answers on one H100 serving Llama-3.1-8B) finishes soonest with continuous
    batching, then static batches of 8, then one request at a time."""
    throughput = {}
    for name, scheduler in (("single", single()), ("static", static(batch_size=8)),
                            ("continuous", continuous())):
        results = run_scenario(
            stream=poisson_stream(rate=20, prompt_tokens=512,
                                  output_tokens=lognormal(200, 1.0, max=2000)),
            pool=make_pool(scheduler=scheduler), duration=30.0, seed=5)
        assert (results.requests["status"] == "completed").all()
        throughput[name] = results.summary["throughput"]["output_tokens_per_s"]
    assert throughput["continuous"] > 2 * throughput["static"]
    assert throughput["static"] > 2 * throughput["single"]


@pytest.mark.parametrize("scheduler", [single(), static(batch_size=4, batch_timeout=0.25),
                                       continuous(), continuous(chunked_prefill=False)])
def test_theory_isolated_request_latency_matches_cost_model(trace_stream, scheduler):
    """A request alone in the system takes one prefill step and one decode step
    per further token, as the cost model prices them, under every scheduler (a
    static batch first waits its timeout for company)."""
    prompt, output = 700, 90
    results = run_scenario(stream=trace_stream([(1.5, prompt, output)]),
                           pool=make_pool(scheduler=scheduler))
    r = results.requests.iloc[0]
    wait_s = scheduler.get("batch_timeout", 0.0) if scheduler["type"] == "static" else 0.0
    cost = make_cost_model()
    assert r["queue_s"] == pytest.approx(wait_s, abs=1e-12)
    prefill_s = single_service_time_s(cost, prompt, 1)
    assert r["ttft_s"] == pytest.approx(wait_s + prefill_s, rel=1e-9)
    assert r["e2e_s"] == pytest.approx(wait_s + single_service_time_s(cost, prompt, output),
                                       rel=1e-9)


# -- fast-forward -------------------------------------------------------------------------
FF_CASES = {
    "chunked-small-budget": dict(chunked_prefill=True, max_num_batched_tokens=1024),
    "chunked-8k-budget": dict(chunked_prefill=True),
    "no-chunking": dict(chunked_prefill=False),
    "two-replicas-roomy-kv": dict(replicas=2, kv_cache_bytes="20GiB", rate=25.0),
}


@pytest.mark.parametrize("case", list(FF_CASES))
def test_fast_forward_equals_exact_stepping(case):
    """Fast-forwarding identical decode steps gives the same per-request times,
    statuses and preemption counts as simulating every step, and the same
    sequence of step boundaries and step sizes."""
    kw = FF_CASES[case]
    fast = run(tight_kv_scenario(exact_steps=False, **kw))
    exact = run(tight_kv_scenario(exact_steps=True, **kw))
    a, b = fast.requests, exact.requests
    assert len(a) == len(b) > 50
    for col in ("admitted_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9, err_msg=col)
    pd.testing.assert_series_equal(a["preemptions"], b["preemptions"])
    pd.testing.assert_series_equal(a["status"], b["status"])
    pd.testing.assert_series_equal(a["output_tokens"], b["output_tokens"])
    if case != "two-replicas-roomy-kv":
        assert a["preemptions"].sum() > 0
    assert fast.summary["pools"]["p"]["max_running_seqs"] \
        == exact.summary["pools"]["p"]["max_running_seqs"]
    order = ["replica", "start_s"]
    sa = fast.steps.sort_values(order, kind="stable").reset_index(drop=True)
    sb = exact.steps.sort_values(order, kind="stable").reset_index(drop=True)
    assert len(sa) == len(sb)
    np.testing.assert_array_equal(sa["replica"], sb["replica"])
    for col in ("start_s", "end_s", "num_tokens"):
        np.testing.assert_allclose(sa[col], sb[col], rtol=1e-9, err_msg=col)
    np.testing.assert_array_equal(sa["num_seqs"], sb["num_seqs"])


def test_fast_forward_records_the_same_kv_use_per_step_as_exact_stepping():
    """The steps table's kv_used_blocks of a fast-forwarded run equals that of
    the step-by-step run (each row holds the blocks in use during that step),
    and so does the KV use sampled into the time series mid-segment."""
    fast = run(tight_kv_scenario(exact_steps=False, kv_cache_bytes="20GiB", rate=25.0))
    exact = run(tight_kv_scenario(exact_steps=True, kv_cache_bytes="20GiB", rate=25.0))
    assert len(fast.steps) == len(exact.steps)
    np.testing.assert_array_equal(fast.steps["kv_used_blocks"], exact.steps["kv_used_blocks"])
    np.testing.assert_allclose(fast.timeseries["kv_util"], exact.timeseries["kv_util"],
                               rtol=0, atol=1e-12)


def test_fast_forward_equals_exact_stepping_when_the_run_is_cut_off(trace_stream):
    """A run cut off by ``drain`` mid-generation reports the same unfinished
    output tokens and busy fraction with fast-forward as with exact steps (up
    to the one step in flight at the cut-off)."""
    rows = [(0.0, 200, 2000), (0.2, 300, 1800)]
    kw = dict(stream=trace_stream(rows), duration=1.0, drain=5.0)
    fast = run_scenario(pool=make_pool(scheduler=continuous(exact_steps=False)), **kw)
    exact = run_scenario(pool=make_pool(scheduler=continuous(exact_steps=True)), **kw)
    assert (exact.requests["status"] == "unfinished").all()
    assert exact.requests["output_tokens"].min() > 500   # generated for seconds
    np.testing.assert_allclose(fast.requests["output_tokens"],
                               exact.requests["output_tokens"], atol=1)
    assert fast.summary["pools"]["p"]["busy_frac"] == pytest.approx(
        exact.summary["pools"]["p"]["busy_frac"], rel=0.01)


def test_static_batch_in_flight_at_cut_off_counts_as_busy(trace_stream):
    """A static batch generating from t=0.05 s until the run is cut off at 6 s
    keeps the GPU busy: the pool's busy fraction is close to 1."""
    results = run_scenario(stream=trace_stream([(0.0, 200, 2000)]),
                           pool=make_pool(scheduler=static(batch_size=2)),
                           duration=1.0, drain=5.0)
    assert (results.requests["status"] == "unfinished").all()
    assert results.summary["pools"]["p"]["busy_frac"] > 0.9


# -- static batching ---------------------------------------------------------------------------
def static_run(*, batch_size=8, batch_timeout=0.2, rate=6.0, duration=120.0, seed=2, **kw):
    return run_scenario(
        stream=poisson_stream(rate=rate, prompt_tokens=lognormal(400, 0.5, max=2000),
                              output_tokens=lognormal(60, 1.0, max=400)),
        pool=make_pool(scheduler=static(batch_size=batch_size, batch_timeout=batch_timeout)),
        duration=duration, seed=seed, **kw)


def batches_of(requests: pd.DataFrame) -> list[pd.DataFrame]:
    return [g for _, g in requests.sort_values("request_id").groupby("admitted_s", sort=True)]


def test_static_batch_shares_admission_and_first_token():
    """Requests of one batch are consecutive arrivals admitted together, get
    their first token together (after the padded prefill), and a batch never
    exceeds batch_size; load fills some batches completely."""
    d = static_run().requests
    sizes = []
    for batch in batches_of(d):
        ids = batch["request_id"].to_numpy()
        assert np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids)))
        assert batch["first_token_s"].nunique() == 1
        sizes.append(len(batch))
    assert max(sizes) == 8
    assert min(sizes) >= 1
    assert sum(sizes) == len(d)


def test_static_batch_keeps_its_slot_until_its_longest_request_ends():
    """The next batch starts no earlier than the previous batch's last finish:
    every sequence keeps its slot until the longest output is done."""
    batches = batches_of(static_run().requests)
    for prev, nxt in zip(batches, batches[1:]):
        assert nxt["admitted_s"].iloc[0] >= prev["finish_s"].max() - 1e-12


@pytest.mark.parametrize("batch_size,batch_timeout,rate", [(8, 0.2, 6.0), (4, 0.5, 3.0),
                                                           (16, 0.05, 30.0)])
def test_theory_static_batch_closes_when_full_or_timed_out(batch_size, batch_timeout, rate):
    """A batch starts at max(previous batch end, min(oldest arrival + timeout,
    arrival of the batch_size-th waiting request)): it closes when full or when
    its oldest request has waited batch_timeout, whichever is first, as soon as
    the server is free."""
    d = static_run(batch_size=batch_size, batch_timeout=batch_timeout, rate=rate).requests
    arrival = d.sort_values("request_id")["arrival_s"].to_numpy()
    prev_end = 0.0
    for batch in batches_of(d):
        first = int(batch["request_id"].iloc[0])
        filled_s = arrival[first + batch_size - 1] if first + batch_size - 1 < len(arrival) \
            else math.inf
        expected = max(prev_end, min(arrival[first] + batch_timeout, filled_s))
        assert batch["admitted_s"].iloc[0] == pytest.approx(expected, rel=1e-12, abs=1e-9)
        prev_end = batch["finish_s"].max()


def test_static_batch_waits_at_most_the_timeout_on_an_idle_server(trace_stream):
    """Requests arriving at an idle server wait exactly batch_timeout when the
    batch does not fill, and less when it fills first."""
    rows = [(0.0, 100, 10), (5.0, 100, 10), (5.01, 100, 10), (10.0, 100, 10),
            (10.05, 100, 10), (10.1, 100, 10)]
    d = run_scenario(stream=trace_stream(rows),
                     pool=make_pool(scheduler=static(batch_size=3, batch_timeout=0.3))
                     ).requests.set_index("request_id")
    assert d.loc[0, "queue_s"] == pytest.approx(0.3, abs=1e-9)
    assert d.loc[1, "queue_s"] == pytest.approx(0.3, abs=1e-9)
    assert d.loc[2, "queue_s"] == pytest.approx(0.29, abs=1e-9)
    assert d.loc[3, "queue_s"] == pytest.approx(0.1, abs=1e-9)   # third arrival fills it
    assert (d["queue_s"] <= 0.3 + 1e-9).all()
    assert d.loc[3:5, "admitted_s"].nunique() == 1


# -- determinism ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scheduler", [single(), static(), continuous()])
def test_same_seed_gives_identical_results(scheduler):
    """Running the same scenario twice gives identical request tables, time
    series and summaries."""
    kw = dict(stream=poisson_stream(rate=15, prompt_tokens=lognormal(500, 1.0, max=4000),
                                    output_tokens=lognormal(100, 1.0, max=1000)),
              pool=make_pool(scheduler=scheduler, replicas=2), duration=20.0, seed=11)
    a, b = run_scenario(**kw), run_scenario(**kw)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    assert a.summary == b.summary


def test_different_seed_gives_different_arrivals():
    """Changing only the seed changes the arrival times and lengths drawn."""
    kw = dict(stream=poisson_stream(rate=15, prompt_tokens=lognormal(500, 1.0),
                                    output_tokens=lognormal(100, 1.0)), duration=20.0)
    a = run_scenario(seed=1, **kw).requests
    b = run_scenario(seed=2, **kw).requests
    n = min(len(a), len(b))
    assert not np.array_equal(a["arrival_s"].to_numpy()[:n], b["arrival_s"].to_numpy()[:n])
    assert not np.array_equal(a["prompt_tokens"].to_numpy()[:n],
                              b["prompt_tokens"].to_numpy()[:n])


# -- chunked prefill ------------------------------------------------------------------------------
def test_chunked_prefill_serves_a_prompt_larger_than_the_token_budget(trace_stream):
    """With chunked prefill a 10,000-token prompt is computed over several steps
    of at most max_num_batched_tokens tokens and completes; its first token
    comes only after the last chunk."""
    results = run_scenario(stream=trace_stream([(0.0, 10_000, 20), (0.5, 300, 20)]),
                           pool=make_pool(scheduler=continuous(chunked_prefill=True,
                                                               max_num_batched_tokens=4096)),
                           record_steps=True)
    d = results.requests.set_index("request_id")
    assert (d["status"] == "completed").all()
    assert (d["output_tokens"] == 20).all()
    steps = results.steps
    assert steps["num_tokens"].max() <= 4096
    assert (steps["end_s"] <= d.loc[0, "first_token_s"] + 1e-12).sum() >= 3  # >= 3 chunks


@pytest.mark.parametrize("prompt,output", [(10_000, 20), (8000, 500)])
def test_without_chunked_prefill_an_oversized_request_is_rejected(trace_stream, prompt,
                                                                  output):
    """With chunked prefill off, a request whose prompt plus output exceeds the
    step budget (a preempted one is recomputed in one step) is rejected with
    'exceeds_token_budget'; the others are served."""
    results = run_scenario(stream=trace_stream([(0.0, prompt, output), (0.5, 300, 20)]),
                           pool=make_pool(scheduler=continuous(chunked_prefill=False,
                                                               max_num_batched_tokens=8192)))
    d = results.requests.set_index("request_id")
    assert d.loc[0, "status"] == "rejected"
    assert d.loc[0, "reject_reason"] == "exceeds_token_budget"
    assert d.loc[1, "status"] == "completed"


@pytest.mark.parametrize("limits, longest, reason", [
    (dict(num_blocks=8, max_model_len=100), 100, "exceeds_max_model_len"),
    (dict(num_blocks=4, max_model_len=1000), 64, "exceeds_kv_capacity"),
    (dict(num_blocks=64, max_model_len=1000, chunked_prefill=False,
          max_num_batched_tokens=300), 300, "exceeds_token_budget"),
])
def test_reject_reason_holds_at_each_limit_and_refuses_one_token_more(limits, longest, reason):
    """The longest servable sequence is the tightest of the model length, the
    cache (16-token blocks) and, without chunking, the step budget: a sequence
    of exactly that length passes, one token more is refused for that limit."""
    sched = make_continuous_scheduler(block_size_tokens=16, **limits)
    ok = make_request(request_id=0, prompt_tokens=longest - 10, max_output_tokens=10)
    over = make_request(request_id=1, prompt_tokens=longest - 9, max_output_tokens=10)
    assert sched.reject_reason(ok) is None
    assert sched.reject_reason(over) == reason
