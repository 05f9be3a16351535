"""Prefill-only steps of the continuous step (``prefill_only_steps``): a step that
prefills runs no decode and the decoders wait for it, their next gap between tokens
growing by it (vLLM V0's default scheduler, SGLang without mixed chunks).

A part of ``ContinuousScheduler`` (``continuous.py``), mixed into it: its methods read and
change that scheduler's state.
"""
from __future__ import annotations

from sim.entities.request import Request
from sim.schedulers.base import Segment


class PrefillOnlySteps:
    __slots__ = ()

    def _finish_paused_step(self, seg: Segment, prefill: list[tuple[Request, int]],
                            end_s: float) -> None:
        """A prefill-only step ended: the decoders did not advance (``self.step`` counts
        their steps) and their next gap grows by it; its prefill chunks are applied."""
        self._paused_seg = None
        self._segments_done += 1
        waited = sum(p[2] for p in self._pauses)
        for pause in self._pauses:
            pause[1] += seg.step_end_s[0]
        self._pauses.append([self._segments_done, seg.step_end_s[0],
                             max(self.cohort.num_measured - waited, 0)])
        finished: list[Request] = []
        self._apply_prefill(prefill, end_s, finished)
        self._complete_all(finished, end_s)

    def _after_pauses(self, seg: Segment, num_steps: int) -> int:
        """The decoders advance again after prefill-only steps: a decoder's first gap
        is this step plus every pause since its last token. Its longest gap (``_gap_max``,
        by the segment it waited from) and the pooled gaps take them; the pooled count
        of this step is then only of the decoders that did not wait (those that joined
        in the last pause), the rest added here, steps after the first as usual; returns
        how many measured decoders it counted. A decoder preempted at this step's
        allocation had waited too: the newest waiters go first (vLLM's victims)."""
        first = seg.step_end_s[0]
        gap_max, gap_seg = self._gap_max, self._gap_seg
        measured = self.cohort.num_measured
        waited = 0
        groups = []
        for seg_no, carry_s, count in self._pauses:
            value = carry_s + first
            while gap_max and gap_max[-1] <= value:
                gap_seg.pop()
                gap_max.pop()
            gap_seg.append(seg_no)        # counts for the decoders that joined before it
            gap_max.append(value)
            groups.append((value, count))
            waited += count
        self._pauses.clear()
        over = max(waited - measured, 0)
        gaps = self.gaps
        for value, count in reversed(groups):
            take = min(count, over)
            over -= take
            if count - take:
                gaps.add(value, count - take)
        paused = min(waited, measured)
        if paused and num_steps > 1:
            gaps.add_steps_after_first(seg.step_end_s, num_steps, paused)
        return paused
