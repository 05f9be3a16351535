"""The fast-forward of the continuous step: when a step only decodes and nothing was
preempted or admitted, the following steps are identical but for one more KV token per
sequence; they are planned as one interruptible segment, up to the first completion or
the first step whose KV blocks would run out.

A part of ``ContinuousScheduler`` (``continuous.py``), mixed into it: its methods read and
change that scheduler's state.
"""
from __future__ import annotations

from sim.entities.request import Request
from sim.schedulers.base import Segment

_NO_PREFILL: list[tuple[Request, int]] = []      # the payload of decode-only segments; never mutated


class FastForward:
    __slots__ = ()

    def _fast_forward(self, n: int) -> Segment:
        """Plan every identical decode step of the ``n`` decoders up to a finish or
        a KV shortfall (their first step's blocks are taken)."""
        cohort, step = self.cohort, self.step
        finish = cohort.next_finish_step()
        num_steps = self._steps_within_free_blocks(finish - step)
        kv_first = float(cohort.sum_base + n * (step + 1))     # kv_tokens_at(step + 1)
        if num_steps == 1:
            time_s, flops, moved = self.cost.step_scalar(float(n), float(n), 0.0, kv_first)
            return Segment.single_step(time_s, n, float(n), flops, moved, _NO_PREFILL)
        run = self.cost.decode_run(n, kv_first, num_steps)
        return Segment(run.step_end_s, num_steps, run.duration_s, n, (run.tokens_per_step, 0.0),
                       (run.flops_first, run.flops_slope), (run.bytes_first, run.bytes_slope),
                       True, _NO_PREFILL)

    def _steps_within_free_blocks(self, max_steps: int) -> int:
        """Largest j <= max_steps whose steps 2..j need at most the free blocks
        (step 1's blocks are already held). A waiting head that could start from cached
        blocks is checked again before the decoders evict any (its need changes with
        them: the evictable blocks it would take count against the free ones), so the
        run stops where never-used blocks run out."""
        cohort, kv = self.cohort, self.kv
        free = kv.num_free_blocks
        if self.waiting and kv.num_cached_blocks and kv.hit_blocks(self.waiting[0]):
            free -= kv.num_cached_blocks
        held = cohort.blocks_held
        end_step = self.step + max_steps
        end_blocks = cohort.blocks_at(end_step)
        if end_blocks - held <= free:
            # finish_segment needs them again when the run is not cut
            self._planned_blocks = (end_step, end_blocks)
            return max_steps
        self._planned_blocks = (-1, 0)

        def extra(j: int) -> int:
            return cohort.blocks_at(self.step + j) - held
        lo, hi = 1, max_steps  # extra(lo) <= free < extra(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if extra(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def kv_used_blocks_during(self, seg: Segment, steps_done: int) -> int:
        """During a fast-forward the step in progress holds the blocks it was
        allocated at its start, as it would when stepping one at a time."""
        if seg is self._paused_seg:
            return self.kv.num_used_blocks      # the decoders wait: no blocks for them
        in_progress = min(steps_done + 1, seg.num_steps)
        return (self.kv.num_used_blocks + self.cohort.blocks_at(self.step + in_progress)
                - self.cohort.blocks_held)
