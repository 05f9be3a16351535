"""``kv_admission: estimated_output`` (SGLang's PrefillAdder): a waiting request is admitted
only when the free KV, less a share (the new-token ratio) of every running request's
output to come, holds its prompt and its whole output cap; KV is still taken as tokens
are computed, and a shortfall still preempts."""
from __future__ import annotations

import pytest

from simfactories import make_continuous_scheduler, make_request, run_step
from sim.schedulers.output_estimate import INIT_RATIO, MIN_RATIO, OutputEstimate


def test_the_ratio_falls_from_0_7_to_0_098_over_600_decode_steps():
    est = OutputEstimate(1024)
    assert est.ratio(0) == pytest.approx(0.7)
    assert est.ratio(300) == pytest.approx(0.7 - 300 * (0.7 - 0.098) / 600)
    assert est.ratio(600) == pytest.approx(0.098)
    assert est.ratio(5000) == pytest.approx(MIN_RATIO)


def test_a_retraction_restarts_the_ratio_from_the_output_done_and_idle_resets_it():
    est = OutputEstimate(1000)
    # 10 requests left running with 2,800 output tokens: (2800 + 20 x 10) / (10 x 1000)
    est.retracted(step=900, num_running=10, running_output_tokens=2800)
    assert est.ratio(900) == pytest.approx(0.3)
    assert est.ratio(950) == pytest.approx(0.3 - 50 * (0.7 - 0.098) / 600)
    est.idle(step=2000)
    assert est.ratio(2000) == pytest.approx(INIT_RATIO)


def test_the_reserve_is_the_ratio_of_each_requests_clipped_output_to_come():
    est = OutputEstimate(1024)
    # at step 600 the ratio is at its floor: 10 requests with 100 output tokens each
    assert est.reserve_tokens(600, 10, 1000) == pytest.approx((10 * 1024 - 1000) * 0.098)
    # a cap above 4,096 is clipped: each of these has 4,096 to come as far as SGLang knows
    assert OutputEstimate(5000).reserve_tokens(600, 10, 1000) == pytest.approx(
        10 * 4096 * 0.098)
    assert OutputEstimate(None).need_tokens(200, 0) == 200 + 4096
    assert est.need_tokens(200, 1100) == 200          # past its cap: nothing more to come


def _tight(kv_admission: str):
    """64 blocks of 16 tokens (1,024 tokens); 24 requests of 100 prompt tokens and 200
    output tokens (the clients' cap 256), all waiting; prefill-only steps, as SGLang
    runs them without mixed chunks. Runs them all; returns the scheduler and requests."""
    sched = make_continuous_scheduler(num_blocks=64, block_size_tokens=16,
                                      max_num_batched_tokens=2048, max_num_seqs=64,
                                      kv_admission=kv_admission, max_new_tokens=256,
                                      prefill_only_steps=True)
    reqs = [make_request(request_id=i, prompt_tokens=100, max_output_tokens=200)
            for i in range(24)]
    for r in reqs:
        sched.add(r)
    most_running = 0
    for _ in range(20_000):
        if run_step(sched) is None:
            break
        most_running = max(most_running, sched.num_running)
    assert all(r.done for r in reqs)
    return sched, reqs, most_running


def test_on_demand_admission_with_prefill_only_steps_preempts_what_it_admits():
    _, reqs, _ = _tight("on_demand")
    assert sum(r.preemptions for r in reqs) > 0


def test_estimated_output_admission_leaves_the_decodes_room_and_preempts_none():
    _, reqs, most_running = _tight("estimated_output")
    assert sum(r.preemptions for r in reqs) == 0
    # step 1: the first is admitted (nothing runs), the second's 100 + 256 fit beside the
    # first's need in the 912 tokens left; the third's do not (356 + 712 > 800). Once
    # they run, each holds 7 blocks and reserves 0.7 x 256: a third fits (356 < 800 - 358),
    # a fourth never does (356 > 688 - 3 x 0.7 x 255)
    assert most_running == 3


def test_a_request_whose_estimate_exceeds_the_cache_runs_when_nothing_else_does():
    sched = make_continuous_scheduler(num_blocks=16, block_size_tokens=16,
                                      kv_admission="estimated_output")   # 256 tokens
    req = make_request(request_id=0, prompt_tokens=100, max_output_tokens=20)
    sched.add(req)                          # its need: 100 + 4,096 (no cap given)
    for _ in range(100):
        if run_step(sched) is None:
            break
    assert req.done and req.preemptions == 0
