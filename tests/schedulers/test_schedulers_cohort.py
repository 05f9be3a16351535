"""The decode cohort's bookkeeping stays the size of its members."""
from __future__ import annotations

from sim.entities.request import Request
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


def test_blocks_entering_a_step_is_the_difference_of_blocks_held_around_it():
    """The O(1) count of new blocks a step needs equals blocks_at(step) - blocks_at(step - 1)
    counted member by member, for contexts on and off block boundaries, with shared
    prefix blocks, across several block lengths, while members join and leave."""
    import random
    rng = random.Random(7)
    for bs in (1, 2, 16):
        cohort = DecodeCohort(block_size_tokens=bs)
        members: list[Request] = []
        for seq in range(60):
            step = seq * 3
            req = make_request(seq, prompt_tokens=rng.randint(1, 5 * bs + 1))
            req.prefix_blocks = rng.choice([0, 0, 1]) if req.prompt_tokens > bs else 0
            cohort.add(req, step=step, blocks=0)
            members.append(req)
            if len(members) > 8:
                cohort.remove(members.pop(rng.randrange(len(members))), step=step)
            for later in range(step + 1, step + 2 * bs + 2):
                by_member = sum(-(-(r.decode_base + later) // bs) - -(-(r.decode_base + later - 1) // bs)
                                for r in members)
                assert cohort.blocks_entering(later) == by_member
                assert cohort.blocks_at(later) - cohort.blocks_at(later - 1) == by_member
