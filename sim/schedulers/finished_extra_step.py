"""The finished request's extra step (``finished_extra_step``): a request whose last
token came with step k decodes once more in step k+1, its token thrown away, keeping its
batch slot and KV blocks to k+1's end (a scheduler that forms step k+1 before reading
step k's tokens: vLLM's async scheduling, the overlap schedulers of SGLang and
TensorRT-LLM).

A part of ``ContinuousScheduler`` (``continuous.py``), mixed into it: its methods read and
change that scheduler's state.
"""
from __future__ import annotations

from sim.entities.request import Request
from sim.schedulers.base import Segment


class FinishedExtraStep:
    __slots__ = ()

    def _leave_before_extra_step(self, req: Request, alloc_step: int | None) -> None:
        """A finished request chosen to make room before its extra step: it has all its
        tokens (the last at the decode step just ended), so it leaves, not requeued."""
        self._stop_decoding(req, self._decode_end_s)
        self.cohort.remove(req, self.step, alloc_step)
        if self._no_evict:
            self._release(req)
        self._complete(req, self._decode_end_s)

    def _end_extra_steps(self, done: list[Request], seg: Segment, num_steps: int,
                         last_s: float) -> int:
        """The requests ``done`` just ran their extra step, their last token having come
        at ``last_s``: they leave the decoders (before this segment's gaps are counted:
        the extra step gives them none) with the tokens they had then, their longest gap
        among the steps before it; returns how many are measured, whose gaps of this
        segment's steps but the last the caller counts."""
        cohort = self.cohort
        before = seg.step_end_s.max_step_s(num_steps - 1) if num_steps > 1 else 0.0
        num_measured = 0
        for req in done:
            self._stop_decoding(req, last_s)      # the segments before this one
            if before > 0 and not (req.max_itl_s >= before):
                req.max_itl_s = before
            if req.arrival_s >= cohort.measured_from_s:
                num_measured += 1
            cohort.remove(req, self.step)
            req.num_output_tokens -= 1            # the extra step's token is thrown away
        return num_measured
