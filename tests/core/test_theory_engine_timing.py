"""The engine around the kernels, on schedules worked out by hand.

Every pool here runs GPU steps of exactly 10 ms whatever the batch (``constant_steps``)
on an inline engine preset (``toy_engine``) that sets one timing rule at a time; each
docstring works the schedule out, and the test asserts the client's times exactly
(to a nanosecond of float rounding). Prompts of 16 tokens prefill in one step.
"""
from __future__ import annotations

import pytest

import sim
from tests.simfactories import (constant_steps, make_pool, make_scenario, toy_engine,
                                trace_stream)

STEP_S = 0.010
EXACT = 1e-9


def _run(tmp_path, monkeypatch, rows, front_end=0, prompt_format="text", **engine):
    """Requests ``rows`` = (arrival s, prompt tokens, output tokens) into one replica on
    the toy engine; the request table in arrival order."""
    constant_steps(monkeypatch, STEP_S)
    stream = {**trace_stream(tmp_path / "t.csv", rows), "prompt_format": prompt_format}
    pool = make_pool(engine="toy", front_end=front_end)
    res = sim.run(make_scenario(stream=stream, pool=pool, duration=1.0,
                                engines={"toy": toy_engine(**engine)}))
    table = res.requests.sort_values("arrival_s").reset_index(drop=True)
    assert (table.status.astype(str) == "completed").all()
    return table


def _times(table, i):
    row = table.iloc[i]
    return row.ttft_s, row.tpot_s, row.finish_s


def test_theory_synchronous_host_time_adds_to_every_step(tmp_path, monkeypatch):
    """Host 8 ms + 1 ms per sequence, synchronous. Three requests at t = 0, 3 tokens
    each, share every step: each step is 10 + 8 + 3 = 21 ms. Tokens at 21, 42, 63 ms:
    TTFT 21 ms, TPOT 21 ms, finish 63 ms for all three."""
    table = _run(tmp_path, monkeypatch, [(0.0, 16, 3)] * 3, host_mode="sync",
                 host_constant_s=0.008, host_per_seq_s=0.001)
    for i in range(3):
        assert _times(table, i) == pytest.approx((0.021, 0.021, 0.063), abs=EXACT)


def test_theory_overlapped_host_time_shows_only_beyond_the_gpu_step(tmp_path, monkeypatch):
    """The same host time, overlapped: a step lasts max(10 ms, host). Three sequences:
    host 11 ms > 10, each step 11 ms: TTFT 11, TPOT 11, finish 33 ms. One sequence
    alone: host 9 ms < 10, hidden: TTFT 10, TPOT 10, finish 30 ms."""
    host = dict(host_mode="overlap", host_constant_s=0.008, host_per_seq_s=0.001)
    three = _run(tmp_path, monkeypatch, [(0.0, 16, 3)] * 3, **host)
    for i in range(3):
        assert _times(three, i) == pytest.approx((0.011, 0.011, 0.033), abs=EXACT)
    one = _run(tmp_path, monkeypatch, [(0.0, 16, 3)], **host)
    assert _times(one, 0) == pytest.approx((0.010, 0.010, 0.030), abs=EXACT)


def test_theory_a_new_request_joins_the_next_step(tmp_path, monkeypatch):
    """No host time, join next. A (t = 0, 4 tokens) prefills in [0, 10] and decodes in
    [10, 20], [20, 30], [30, 40]: TTFT 10, TPOT 10, finish 40 ms. B arrives at 15 ms,
    during A's second step, and prefills in the next, [20, 30]: TTFT 15 ms; its two
    more tokens at 40 and 50 ms: TPOT 10, finish 50 ms."""
    table = _run(tmp_path, monkeypatch, [(0.0, 16, 4), (0.015, 16, 3)], join="next")
    assert _times(table, 0) == pytest.approx((0.010, 0.010, 0.040), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.015, 0.010, 0.050), abs=EXACT)


def test_theory_a_one_step_ahead_scheduler_lets_a_new_request_join_the_step_after_next(
        tmp_path, monkeypatch):
    """Join after next: the batch of step k+1 is formed while step k runs. A as in the
    join-next schedule (the replica was idle: A starts at once, TTFT 10, finish 40 ms).
    B arrives at 15 ms, during A's step [10, 20]; step [20, 30] was formed without it,
    so B prefills in [30, 40]: TTFT 25 ms, tokens at 40, 50, 60: TPOT 10, finish 60."""
    table = _run(tmp_path, monkeypatch, [(0.0, 16, 4), (0.015, 16, 3)], join="after_next")
    assert _times(table, 0) == pytest.approx((0.010, 0.010, 0.040), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.025, 0.010, 0.060), abs=EXACT)


def test_theory_a_multi_step_block_holds_new_requests_and_streams_tokens_in_bursts(
        tmp_path, monkeypatch):
    """multi_step 4, no host time. A (t = 0, 6 tokens): block one is steps 1-4 ending at
    10, 20, 30, 40 ms (A's tokens 1-4), block two starts at 40 ms. B (t = 15 ms, 2
    tokens) waits for block one to end and prefills in step 5, [40, 50]; step 6
    [50, 60] gives A's 6th token and B's 2nd: both finish, nothing is left to run and
    the block ends at 60 ms. The client sees a block's tokens at its end: A's first at
    40 ms (TTFT 40), its last at 60 (TPOT (60 - 40) / 5 = 4 ms); B's first and last at
    60 ms (TTFT 45 ms, TPOT 0)."""
    table = _run(tmp_path, monkeypatch, [(0.0, 16, 6), (0.015, 16, 2)], multi_step=4)
    assert _times(table, 0) == pytest.approx((0.040, 0.004, 0.060), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.045, 0.0, 0.060), abs=EXACT)


def test_theory_multi_step_pays_the_host_time_once_a_block(tmp_path, monkeypatch):
    """multi_step 4, synchronous host 8 ms + 0 per sequence: 2 ms a step, each 12 ms.
    One request of 4 tokens fills one block: tokens at 12, 24, 36, 48 ms, all seen at
    48 ms: TTFT 48, TPOT 0, finish 48 ms."""
    table = _run(tmp_path, monkeypatch, [(0.0, 16, 4)], multi_step=4,
                 host_constant_s=0.008)
    assert _times(table, 0) == pytest.approx((0.048, 0.0, 0.048), abs=EXACT)


def test_theory_the_front_end_and_the_token_hop_delay_what_the_client_sees(
        tmp_path, monkeypatch):
    """Front end 5 ms + 0.1 ms per prompt token, token hop 1 ms, join next. A (t = 0,
    100 prompt tokens, 3 tokens) reaches the scheduler at 15 ms, its steps [15, 25],
    [25, 35], [35, 45]. B (t = 0, 250 prompt tokens, 2 tokens) reaches it at 30 ms,
    during A's second step, and prefills in [35, 45], decoding in [45, 55]. Each token
    reaches the client 1 ms after its step: A's TTFT 26 ms, TPOT 10, finish 46 ms; B's
    TTFT 46, TPOT 10, finish 56 ms."""
    table = _run(tmp_path, monkeypatch, [(0.0, 100, 3), (0.0, 250, 2)], front_end=None,
                 front_end_constant_s=0.005, front_end_per_prompt_token_s=1e-4,
                 token_hop_s=0.001)
    table = table.sort_values("prompt_tokens").reset_index(drop=True)
    assert _times(table, 0) == pytest.approx((0.026, 0.010, 0.046), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.046, 0.010, 0.056), abs=EXACT)


def test_theory_a_prompt_sent_as_token_ids_skips_the_cost_per_prompt_token(
        tmp_path, monkeypatch):
    """As above, the client sending token ids (``prompt_format: token_ids``): both reach
    the scheduler at 5 ms, nothing to tokenise. A and B prefill together in [5, 15]; A's
    tokens end steps at 15, 25, 35 and B's at 15, 25, each seen 1 ms later: A's TTFT
    16 ms, TPOT 10, finish 36 ms; B's TTFT 16, TPOT 10, finish 26 ms."""
    table = _run(tmp_path, monkeypatch, [(0.0, 100, 3), (0.0, 250, 2)], front_end=None,
                 prompt_format="token_ids", front_end_constant_s=0.005,
                 front_end_per_prompt_token_s=1e-4, token_hop_s=0.001)
    table = table.sort_values("prompt_tokens").reset_index(drop=True)
    assert _times(table, 0) == pytest.approx((0.016, 0.010, 0.036), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.016, 0.010, 0.026), abs=EXACT)


def test_theory_a_pools_own_front_end_replaces_the_presets_whole_front_end(
        tmp_path, monkeypatch):
    """``front_end: 7ms`` on the pool: no per-token cost and no hop. One request
    (t = 0, 3 tokens) starts at 7 ms: tokens at 17, 27, 37 ms: TTFT 17, finish 37."""
    table = _run(tmp_path, monkeypatch, [(0.0, 100, 3)], front_end=0.007,
                 front_end_constant_s=0.005, front_end_per_prompt_token_s=1e-4,
                 token_hop_s=0.001)
    assert _times(table, 0) == pytest.approx((0.017, 0.010, 0.037), abs=EXACT)


@pytest.mark.parametrize("engine", ["vllm@v0", "vllm@v0-multistep", "vllm@v1", "vllm@async",
                                    "sglang", "trtllm@pytorch", "trtllm@cpp"])
def test_fast_forward_equals_step_by_step_on_every_engine_version(engine):
    """Held arrivals, blocks and overlapped host time cut fast-forwards exactly where the
    step-by-step loop would admit a request: the request table is the same."""
    from tests.simfactories import continuous, poisson_stream

    def table(exact: bool):
        pool = make_pool(engine=engine, front_end=None, cost_model={"type": "roofline"},
                         scheduler=continuous(exact_steps=exact))
        res = sim.run(make_scenario(stream=poisson_stream(rate=20.0, prompt_tokens=200,
                                                          output_tokens=60),
                                    pool=pool, duration=5.0))
        return res.requests[["request_id", "first_token_s", "finish_s", "status"]]

    fast, exact = table(False), table(True)
    assert (fast.status.astype(str) == "completed").all()
    assert fast.request_id.tolist() == exact.request_id.tolist()
    assert fast.first_token_s.to_numpy() == pytest.approx(exact.first_token_s.to_numpy(),
                                                          abs=1e-9)
    assert fast.finish_s.to_numpy() == pytest.approx(exact.finish_s.to_numpy(), abs=1e-9)


def test_theory_a_prefill_only_step_pauses_the_running_decodes(tmp_path, monkeypatch):
    """``prefill_only_steps`` (vLLM V0 without chunked prefill, SGLang): a step that
    prefills runs no decode. A (t = 0, 4 tokens) prefills in [0, 10] (token 1 at 10) and
    decodes in [10, 20] (token 2). B (t = 15 ms, 3 tokens) arrives during that step and
    prefills alone in [20, 30] (its token 1 at 30): A waits. Both decode in [30, 40] and
    [40, 50]: A's tokens 3 and 4 at 40 and 50, B's 2 and 3. A: TTFT 10 ms, TPOT
    (50 - 10) / 3, longest gap 20 ms (waiting out B's prefill); B: TTFT 15, TPOT 10,
    finish 50. The pooled gaps: A's 10, 20, 10 and B's 10, 10."""
    rows = [(0.0, 16, 4), (0.015, 16, 3)]
    table = _run(tmp_path, monkeypatch, rows, prefill_only_steps=True)
    assert _times(table, 0) == pytest.approx((0.010, 0.040 / 3, 0.050), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.015, 0.010, 0.050), abs=EXACT)
    assert table.iloc[0].max_itl_s == pytest.approx(0.020, abs=EXACT)
    assert table.iloc[1].max_itl_s == pytest.approx(0.010, abs=EXACT)
    # the same requests with prefill and decode sharing a step: B's prefill rides with
    # A's third token in [20, 30], and nobody waits
    mixed = _run(tmp_path, monkeypatch, rows, prefill_only_steps=False)
    assert _times(mixed, 0) == pytest.approx((0.010, 0.010, 0.040), abs=EXACT)
    assert mixed.iloc[0].max_itl_s == pytest.approx(0.010, abs=EXACT)


def test_theory_pooled_gaps_count_the_wait_of_each_decoder_once(tmp_path, monkeypatch):
    """As above, the pooled gaps of both requests: A's 10, 20, 10 ms and B's 10, 10:
    five gaps, mean 12 ms, the longest 20 ms; two prefill-only steps in a row (B and C
    arriving during A's second step, each prefilled alone: [20, 30] and [30, 40]) make A's
    wait 30 ms and B's 10 ms, C's first gap a plain step."""
    constant_steps(monkeypatch, STEP_S)
    stream = trace_stream(tmp_path / "t.csv", [(0.0, 16, 4), (0.015, 16, 3)])
    pool = make_pool(engine="toy", front_end=0,
                     scheduler={"type": "continuous", "max_num_batched_tokens": 16,
                                "max_num_seqs": 16})
    res = sim.run(make_scenario(stream=stream, pool=pool, duration=1.0,
                                engines={"toy": toy_engine(prefill_only_steps=True)}))
    itl = res.summary["latency_s"]["itl"]
    assert itl["max"] == pytest.approx(0.020, abs=EXACT)
    assert itl["mean"] == pytest.approx(0.012, abs=EXACT)
    # B and C both arrive during A's second step; the 16-token budget prefills one a step
    stream = trace_stream(tmp_path / "t3.csv", [(0.0, 16, 4), (0.012, 16, 3), (0.015, 16, 2)])
    res = sim.run(make_scenario(stream=stream, pool=pool, duration=1.0,
                                engines={"toy": toy_engine(prefill_only_steps=True)}))
    table = res.requests.sort_values("arrival_s").reset_index(drop=True)
    # A: tokens at 10, 20, (B's and C's prefills) 50, 60; B: 30, (C's prefill) 50, 60;
    # C: 40, 50
    assert _times(table, 0) == pytest.approx((0.010, 0.050 / 3, 0.060), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.030 - 0.012, 0.015, 0.060), abs=EXACT)
    assert _times(table, 2) == pytest.approx((0.040 - 0.015, 0.010, 0.050), abs=EXACT)
    assert list(table.max_itl_s) == pytest.approx([0.030, 0.020, 0.010], abs=EXACT)
    itl = res.summary["latency_s"]["itl"]
    # gaps: A 10, 30, 10; B 20, 10; C 10: six, 90 ms in all
    assert itl["max"] == pytest.approx(0.030, abs=EXACT)
    assert itl["mean"] == pytest.approx(0.090 / 6, abs=EXACT)


def test_theory_a_finished_request_keeps_its_batch_slot_for_one_extra_step(
        tmp_path, monkeypatch):
    """``finished_extra_steps: 1`` (a scheduler that forms step k+1 before it has read
    step k's tokens), one sequence a step (``max_num_seqs: 1``). A (t = 0, 3 tokens)
    prefills in [0, 10] and decodes in [10, 20] and [20, 30]: its last token at 30 ms
    (TTFT 10, TPOT 10, finish 30). Step [30, 40] was formed with A still in it: A decodes
    once more, its token thrown away, and B (t = 0, 2 tokens) waits for the slot: B
    prefills in [40, 50] and decodes in [50, 60]: TTFT 50, TPOT 10, finish 60 (without
    the extra step B would start at 30: TTFT 40, finish 50). Each client gets exactly
    its own tokens."""
    rows = [(0.0, 16, 3), (0.0, 16, 2)]
    one_seq = {"type": "continuous", "max_num_batched_tokens": 16, "max_num_seqs": 1}
    constant_steps(monkeypatch, STEP_S)
    for extra, b_times in ((1, (0.050, 0.010, 0.060)), (0, (0.040, 0.010, 0.050))):
        stream = trace_stream(tmp_path / f"t{extra}.csv", rows)
        pool = make_pool(engine="toy", front_end=0, scheduler=one_seq)
        res = sim.run(make_scenario(stream=stream, pool=pool, duration=1.0, engines={
            "toy": toy_engine(finished_extra_steps=extra)}))
        table = res.requests.sort_values("request_id").reset_index(drop=True)
        assert (table.status.astype(str) == "completed").all()
        assert _times(table, 0) == pytest.approx((0.010, 0.010, 0.030), abs=EXACT)
        assert _times(table, 1) == pytest.approx(b_times, abs=EXACT)
        assert list(table.output_tokens) == [3, 2]


def test_theory_a_finished_requests_extra_step_is_in_the_batch_shape(tmp_path, monkeypatch):
    """Host time 1 ms a sequence, synchronous, with the extra step. A (t = 0, 2 tokens)
    and B (t = 0, 4 tokens) prefill together in [0, 12] (10 + 2 sequences) and decode
    together in [12, 24]: A's last token at 24. Step three still holds A (its extra
    step): 12 ms, B's 3rd token at 36; B alone in [36, 47]: its 4th at 47. A: TTFT 12,
    TPOT 12, finish 24; B: TTFT 12, TPOT (47 - 12) / 3, finish 47 (46 without the extra
    step). The pooled gaps are the clients' own: A's 12; B's 12, 12, 11 (the extra step
    gives A no gap)."""
    rows = [(0.0, 16, 2), (0.0, 16, 4)]
    constant_steps(monkeypatch, STEP_S)
    stream = trace_stream(tmp_path / "t.csv", rows)
    pool = make_pool(engine="toy", front_end=0)
    res = sim.run(make_scenario(stream=stream, pool=pool, duration=1.0, engines={
        "toy": toy_engine(finished_extra_steps=1, host_per_seq_s=0.001)}))
    table = res.requests.sort_values("request_id").reset_index(drop=True)
    assert _times(table, 0) == pytest.approx((0.012, 0.012, 0.024), abs=EXACT)
    assert _times(table, 1) == pytest.approx((0.012, 0.035 / 3, 0.047), abs=EXACT)
    assert list(table.max_itl_s) == pytest.approx([0.012, 0.012], abs=EXACT)
    itl = res.summary["latency_s"]["itl"]
    assert itl["mean"] == pytest.approx(0.047 / 4, abs=EXACT)
    assert itl["max"] == pytest.approx(0.012, abs=EXACT)
