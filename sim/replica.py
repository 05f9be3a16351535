"""A model server replica: a SimPy process that runs its scheduler's segments.

The replica knows nothing of batching policy; it asks the scheduler for the
next segment, waits for it (or for a request when idle, or for a batching
deadline), and reports what ran. New requests wake it; an interruptible
segment is cut at the first step boundary after the wake-up.
"""
from __future__ import annotations

import simpy

from sim.recorder import Recorder
from sim.request import Request
from sim.schedulers.base import Scheduler, Segment


class Replica:
    def __init__(self, env: simpy.Environment, pool_code: int, index: int,
                 scheduler: Scheduler, recorder: Recorder) -> None:
        self.env = env
        self.pool_code = pool_code
        self.index = index
        self.scheduler = scheduler
        self.recorder = recorder
        self._wake: simpy.Event | None = None
        self.process = env.process(self._run())

    # -- the router's view --------------------------------------------------------
    @property
    def num_outstanding(self) -> int:
        return self.scheduler.num_outstanding

    @property
    def kv_usage(self) -> float:
        return self.scheduler.kv.usage

    def submit(self, req: Request) -> None:
        req.replica = self.index
        self.scheduler.add(req)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    # -- the loop -------------------------------------------------------------------
    def _run(self):
        env = self.env
        while True:
            plan = self.scheduler.next_segment(env.now)
            if plan is None:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if isinstance(plan, float):
                self._wake = env.event()
                yield env.timeout(plan - env.now) | self._wake
                self._wake = None
                continue
            yield from self._run_segment(plan)

    def _run_segment(self, seg: Segment):
        env = self.env
        start_s = env.now
        total_s = float(seg.step_end_s[-1])
        num_steps = seg.num_steps
        if seg.interruptible:
            self._wake = env.event()
            yield env.timeout(total_s) | self._wake
            if self._wake.triggered and env.now - start_s < total_s:
                num_steps = seg.steps_done_by(env.now - start_s)
                rest_s = float(seg.step_end_s[num_steps - 1]) - (env.now - start_s)
                self._wake = None
                if rest_s > 0:
                    yield env.timeout(rest_s)
            self._wake = None
        else:
            yield env.timeout(total_s)
        self._record(seg, num_steps, start_s)
        self.scheduler.finish_segment(seg, num_steps, start_s)

    def _record(self, seg: Segment, num_steps: int, start_s: float) -> None:
        kv = self.scheduler.kv
        self.recorder.segments.append(
            self.pool_code, self.index, start_s, start_s + float(seg.step_end_s[num_steps - 1]),
            num_steps, seg.num_seqs, float(seg.num_tokens[:num_steps].sum()), float(seg.flops[:num_steps].sum()),
            float(seg.bytes[:num_steps].sum()))
        steps = self.recorder.steps
        if steps is not None:
            prev = start_s
            for k in range(num_steps):
                end = start_s + float(seg.step_end_s[k])
                steps.append(self.pool_code, self.index, prev, end, float(seg.num_tokens[k]),
                             seg.num_seqs, kv.num_used_blocks, kv.num_blocks)
                prev = end
