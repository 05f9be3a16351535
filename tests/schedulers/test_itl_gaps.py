"""The run's pooled inter-token gaps (``Scheduler.gaps``, summary.json's ITL percentiles)
against the gaps each request's tokens show when the scheduler is stepped one step at a
time, and against theory on a constant step time."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from simfactories import make_continuous_scheduler, make_cost_model, make_request, run_step

from sim.schedulers.gaps import GapHistogram
from sim.entities.kv import KvCacheManager
from sim.cost.base import DecodeRun
from sim.cost.steps import LinearStepEnds
from sim.schedulers.base import ReplicaLimits
from sim.schedulers.static import StaticConfig, StaticScheduler

QS = (50.0, 90.0, 95.0, 99.0, 99.9)


class ConstantStepCost:
    """Every step, whatever its batch, lasts ``step_s``."""

    after_idle_s = 0.0

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s

    def step_scalar(self, *args, **kwargs) -> tuple[float, float, float]:
        return self.step_s, 0.0, 0.0

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> DecodeRun:
        ends = LinearStepEnds(self.step_s, 0.0, num_steps)
        return DecodeRun(ends, ends[num_steps - 1], float(num_seqs), 0.0, 0.0, 0.0, 0.0)


def run_to_end(sched, requests, track: bool = True) -> dict[int, list[float]]:
    """Step ``sched`` until it is idle; with ``track``, each request's token times, seen
    after every segment (one step each under ``exact_steps``)."""
    times: dict[int, list[float]] = defaultdict(list)
    counts = {r.request_id: 0 for r in requests}
    finished = {}
    sched.on_finish = lambda req: finished.setdefault(req.request_id, req.num_output_tokens)
    for req in requests:
        sched.add(req)
    now = 0.0
    while (seg := run_step(sched, now)) is not None:
        now += seg.duration_s
        if not track:
            continue
        held = {r.request_id: r.num_output_tokens for r in sched.open_requests()}
        for rid in counts:
            n = finished.get(rid, held.get(rid, counts[rid]))
            assert n - counts[rid] in (0, 1), "one token a request a step"
            if n > counts[rid]:
                times[rid].append(now)
                counts[rid] = n
    return times


def pooled_gaps(times: dict[int, list[float]]) -> np.ndarray:
    return np.concatenate([np.diff(t) for t in times.values()])


def mixed_requests():
    """Prompts of unlike lengths under a small token budget: later ones are prefilled in
    chunks between the first ones' decode steps (longer steps), and join the decoders
    later; a small KV cache preempts some and they resume after a recompute."""
    return [make_request(request_id=i, prompt_tokens=p, max_output_tokens=o)
            for i, (p, o) in enumerate([(40, 30), (300, 25), (700, 40), (90, 60), (500, 12)])]


def test_theory_constant_step_time_makes_every_itl_percentile_the_step_time():
    """With every step lasting 20 ms, every gap between two tokens is 20 ms: each
    percentile reads 20 ms (the bins are clamped to the exact shortest and longest gap),
    and there are Σ (output − 1) gaps."""
    sched = make_continuous_scheduler(cost=ConstantStepCost(0.020), num_blocks=1024)
    reqs = [make_request(request_id=i, prompt_tokens=50 + 30 * i, max_output_tokens=5 + 7 * i)
            for i in range(6)]
    run_to_end(sched, reqs, track=False)
    assert sched.gaps.num_gaps == sum(r.max_output_tokens - 1 for r in reqs)
    for q in QS:
        assert sched.gaps.percentile(q) == pytest.approx(0.020, rel=1e-12)


@pytest.mark.parametrize("num_blocks", [1024, 40], ids=["no-preemption", "preemptions"])
def test_itl_percentiles_match_every_gap_counted_step_by_step(num_blocks):
    """Stepping one step at a time, each request's gaps (its token times' differences,
    the gap across a preemption included) pooled over all requests: the recorded gaps
    have their number and total exactly, and each percentile within the bins' 0.5%."""
    sched = make_continuous_scheduler(num_blocks=num_blocks, max_num_batched_tokens=128, max_num_seqs=16,
                                      exact_steps=True)
    reqs = mixed_requests()
    gaps = pooled_gaps(run_to_end(sched, reqs))
    if num_blocks == 40:
        assert sum(r.preemptions for r in reqs) > 0
    assert len(np.unique(np.round(gaps, 9))) > 2          # unlike gaps: a mixture
    assert sched.gaps.num_gaps == len(gaps)
    assert sched.gaps.sum_s == pytest.approx(gaps.sum(), rel=1e-9)
    assert sched.gaps.max_s == pytest.approx(gaps.max(), rel=1e-9)
    for q in QS:
        assert sched.gaps.percentile(q) == pytest.approx(np.percentile(gaps, q), rel=0.005)


@pytest.mark.parametrize("num_blocks", [1024, 40], ids=["no-preemption", "preemptions"])
def test_fast_forward_records_the_same_gaps_as_stepping(num_blocks):
    """The closed-form runs of identical decode steps add, bin by bin, what stepping
    adds one step at a time."""
    records = []
    for exact in (True, False):
        sched = make_continuous_scheduler(num_blocks=num_blocks, max_num_batched_tokens=128, max_num_seqs=16,
                                          exact_steps=exact)
        run_to_end(sched, mixed_requests(), track=exact)
        records.append(sched.gaps)
    exact, ff = records
    assert ff.num_gaps == exact.num_gaps
    assert ff.sum_s == pytest.approx(exact.sum_s, rel=1e-9)
    assert ff.counts == exact.counts
    for q in QS:
        assert ff.percentile(q) == pytest.approx(exact.percentile(q), rel=1e-9)


def test_gaps_of_requests_arriving_in_the_warm_up_are_left_out():
    """Only requests arriving at or after the recorder's ``measured_from_s`` count."""
    sched = make_continuous_scheduler(num_blocks=1024, cost=ConstantStepCost(0.01),
                                      gaps=GapHistogram(measured_from_s=1.0))
    early = make_request(request_id=0, max_output_tokens=20, arrival_s=0.0)
    late = make_request(request_id=1, max_output_tokens=9, arrival_s=1.0)
    run_to_end(sched, [early, late], track=False)
    assert sched.gaps.num_gaps == 8


def test_a_static_batch_adds_each_requests_decode_steps_up_to_its_last_token():
    """A static batch runs max-output steps; a request's gaps are the decode steps before
    its own last token (a shorter request waits for the batch, not in its gaps)."""
    sched = StaticScheduler(StaticConfig(batch_size=3, batch_timeout=0.0),
                            kv=KvCacheManager(1024, 16), cost=make_cost_model(),
                            limits=ReplicaLimits(max_model_len=1 << 20),
                            on_finish=lambda req: None)
    outputs = (3, 40, 400)
    for i, out in enumerate(outputs):
        sched.add(make_request(request_id=i, prompt_tokens=200, max_output_tokens=out))
    seg = run_step(sched)
    steps_s = np.diff(np.asarray(seg.step_end_s))      # decode step k lasts steps_s[k - 1]
    gaps = np.concatenate([steps_s[:out - 1] for out in outputs])
    assert sched.gaps.num_gaps == len(gaps)
    assert sched.gaps.sum_s == pytest.approx(gaps.sum(), rel=1e-9)
    for q in QS:
        assert sched.gaps.percentile(q) == pytest.approx(np.percentile(gaps, q), rel=0.005)
