"""The decode cohort's bookkeeping stays the size of its members."""
from __future__ import annotations

from sim.request import Request
from sim.schedulers.cohort import DecodeCohort


def make_request(seq: int, *, prompt_tokens: int = 32, max_output_tokens: int = 8) -> Request:
    req = Request(seq, 0, "team", "model", "pool", 0, 0.0, prompt_tokens, max_output_tokens)
    req.seq = seq
    req.num_computed_tokens = prompt_tokens
    req.num_output_tokens = 1
    return req


def test_admission_heap_stays_bounded_and_last_is_the_latest_member():
    """Members that leave (finished or preempted) do not pile up in the heap behind
    ``last()``: after 10,000 members came and went it holds about as many entries as
    there are members, and ``last()`` is still the latest admitted one left."""
    cohort = DecodeCohort(block_size_tokens=16)
    live: list[Request] = []
    for seq in range(10_000):
        req = make_request(seq)
        cohort.add(req, step=seq, blocks=3)
        live.append(req)
        if len(live) > 5:
            # the oldest leaves, and now and then the newest (a preemption victim)
            gone = live.pop(-1) if seq % 7 == 0 else live.pop(0)
            cohort.remove(gone, step=seq)
        assert cohort.last() is max(live, key=lambda r: r.seq)
    assert len(cohort) == len(live) == 5
    assert len(cohort._last_heap) < 200    # not one entry per member ever admitted
