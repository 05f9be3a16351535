"""``kv_admission: whole_prompt`` (vLLM 0.32's scheduler_reserve_full_isl): a waiting
request is admitted only when the free blocks hold its whole prompt beyond its prefix
hit, not only its first chunk; running requests still take blocks as they compute."""
from __future__ import annotations

import pytest

from simfactories import make_continuous_scheduler, make_request, run_step


def _two_prompts(kv_admission: str):
    """16 blocks of 16 tokens, a 64-token budget: request 0 (128 tokens, 8 blocks) is
    running; request 1 (160 tokens, 10 blocks) waits. Its first chunk needs 2-4 blocks,
    which are free; its whole prompt does not fit beside request 0's."""
    sched = make_continuous_scheduler(num_blocks=16, block_size_tokens=16,
                                      max_num_batched_tokens=64, max_num_seqs=8,
                                      kv_admission=kv_admission)
    first = make_request(request_id=0, prompt_tokens=128, max_output_tokens=4)
    sched.add(first)
    run_step(sched)                         # request 0: 64 of its 128 prompt tokens
    second = make_request(request_id=1, prompt_tokens=160, max_output_tokens=4)
    sched.add(second)
    return sched, first, second


def test_on_demand_admits_on_the_first_chunk():
    sched, _, second = _two_prompts("on_demand")
    seg = run_step(sched)
    assert [r.request_id for r, _ in seg.payload] == [0]     # the budget went to request 0
    seg = run_step(sched)                                     # request 0 decodes: 63 left
    assert any(r is second for r, _ in seg.payload)


def test_whole_prompt_waits_until_the_prompt_fits():
    sched, first, second = _two_prompts("whole_prompt")
    admitted_at = None
    for step in range(12):
        seg = run_step(sched)
        if seg is None:
            break
        if admitted_at is None and any(r is second for r, _ in seg.payload):
            admitted_at = step
            # admitted only once request 0 finished and gave its 8 blocks back
            assert first.done and first.num_blocks == 0
            assert sched.kv.num_free_blocks + sched.kv.num_used_blocks == 16
    assert admitted_at is not None
    assert second.preemptions == 0 and first.preemptions == 0


@pytest.mark.parametrize("mode", ["on_demand", "whole_prompt"])
def test_a_prompt_that_fits_is_admitted_the_same_step_either_way(mode):
    sched = make_continuous_scheduler(num_blocks=64, block_size_tokens=16,
                                      max_num_batched_tokens=256, kv_admission=mode)
    for i in range(3):
        sched.add(make_request(request_id=i, prompt_tokens=60, max_output_tokens=2))
    seg = run_step(sched)
    assert sorted(r.request_id for r, _ in seg.payload) == [0, 1, 2]
