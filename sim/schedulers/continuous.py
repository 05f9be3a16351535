"""Iteration-level (continuous) batching with a paged KV cache, vLLM V1 style.

One step: a token budget counts down; running requests are scheduled first
(each catches its computed tokens up to its known tokens: a prefill chunk or
one decode token), preempting the last running request by recompute when a
KV block cannot be had; waiting requests are admitted only if nothing was
preempted in this step. With chunked prefill off, a prompt must fit the
budget whole.

Running requests are admitted at the tail, and a request decodes once its
prefill is done, so the running list is always [decoding..., prefilling...]
in admission order. The decoding ones form a ``DecodeCohort`` handled in
aggregate; the (few) prefilling ones are handled one by one. A step costs
O(block size + prefilling + admitted), not O(batch).

Fast-forward: when a step only decodes and nothing was preempted or
admitted, the following steps are identical but for one more KV token per
sequence. They are planned together up to the first completion or the
first step whose KV blocks would run out, as one interruptible segment; an
arrival cuts it at the next step boundary. ``exact_steps: true`` plans one
step at a time; per-request results are the same.

A scheduler built on this step replaces only what its decoders do
(``speculative.py``: each decoder verifies draft tokens and gains a random
number of them): how decoders are held (``_new_decoders``), take their KV
and budget (``_allocate_decode_step``, ``_decode_tokens``,
``_unschedule_decoder``), join after their prefill (``_join``) and advance
(``next_segment``, ``finish_segment``); admission, prefill chunks, the KV
gates and the FCFS/priority policy stay the continuous step's.

The step's parts that read on their own are mixed into the scheduler, each in its module
(a mixin adds no call or lookup to the step): its settings (``continuous_config.py``),
the KV admission gates (``admission_gates.py``), the fast-forward (``fast_forward.py``),
prefill-only steps (``prefill_only.py``), the finished request's extra step
(``finished_extra_step.py``) and the end of prefill chunks (``prefill_chunks.py``); the
FCFS or priority policy is a strategy the scheduler holds (``ordering.py``). Planning a
step and applying it stay here.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import ClassVar

from sim.entities.request import Request
from sim.schedulers.admission_gates import AdmissionGates
from sim.schedulers.base import Scheduler, Segment
from sim.schedulers.cohort import DecodeCohort
from sim.schedulers.continuous_config import BatchLimits
from sim.schedulers.fast_forward import FastForward
from sim.schedulers.finished_extra_step import FinishedExtraStep
from sim.schedulers.ordering import ORDERS
from sim.schedulers.output_estimate import OutputEstimate
from sim.schedulers.prefill_chunks import PrefillChunks
from sim.schedulers.prefill_only import PrefillOnlySteps


class _Plan:
    __slots__ = ("prefill", "num_decode", "fast_forward", "paused")

    def __init__(self, prefill, num_decode, fast_forward, paused=False):
        self.prefill: list[tuple[Request, int]] = prefill
        self.num_decode: int = num_decode
        self.fast_forward: bool = fast_forward
        self.paused: bool = paused          # a prefill-only step: the decoders wait


class ContinuousScheduler(AdmissionGates, FastForward, PrefillOnlySteps, FinishedExtraStep,
                          PrefillChunks, Scheduler):
    __slots__ = ("cfg", "cohort", "prefilling", "step", "_next_seq", "_now_s", "_chunk_cap",
                 "_segments_done", "_planned_blocks", "_gap_seg", "_gap_max", "order",
                 "_no_evict", "_whole_prompt", "_reserved_blocks", "_reservations", "_exact",
                 "_prefill_only", "_paused_seg", "_pauses", "_estimate", "_extra",
                 "_decode_end_s")
    # whether the decoders (``_new_decoders``) keep a finished request for its extra step
    keeps_finished_extra_step: ClassVar[bool] = True

    def __init__(self, cfg: BatchLimits, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self._exact = self.steps_one_by_one(cfg)
        # the engine's extra step of a finished request (``finished_extra_step``): its
        # last token came at the end of the decode step before, ``_decode_end_s``
        self._extra = 1 if cfg.finished_extra_step and self.keeps_finished_extra_step else 0
        self._decode_end_s = 0.0
        self.cohort = self._new_decoders()
        self.prefilling: list[Request] = []    # running, not yet decoding; admission order
        self.step = 0                          # engine steps completed
        self._next_seq = 0
        self._now_s = 0.0
        self._chunk_cap = (cfg.long_prefill_token_threshold
                           if cfg.chunked_prefill and cfg.long_prefill_token_threshold
                           else cfg.max_num_batched_tokens)
        # Longest step per applied segment, as a stack of suffix maxima: a
        # decoder's longest gap between tokens is the longest step since it joined.
        self._segments_done = 0
        # (step, blocks_at(step)) at the end of the fast-forward planned last, if it fits
        self._planned_blocks = (-1, 0)
        self._gap_seg: list[int] = []
        self._gap_max: list[float] = []
        # guaranteed_no_evict: blocks promised to running requests, whole sequences each
        self._no_evict = cfg.kv_admission == "guaranteed_no_evict"
        self._whole_prompt = cfg.kv_admission == "whole_prompt"
        self._reserved_blocks = 0
        self._reservations: dict[int, int] = {}        # request id -> blocks promised
        # estimated_output: the new-token ratio and its admission test (output_estimate.py)
        self._estimate = (OutputEstimate(cfg.max_new_tokens)
                          if cfg.kv_admission == "estimated_output" else None)
        # the scheduling policy: waiting order, victims, decoders' blocks (ordering.py)
        self.order = ORDERS[cfg.policy](self)
        # prefill-only steps (``prefill_only_steps``): the segment planned as one, and
        # the pauses the decoders sat through since they last advanced, each [segment
        # number, seconds, decoders measured that waited from it on]
        self._prefill_only = bool(getattr(cfg, "prefill_only_steps", False))
        self._paused_seg: Segment | None = None
        self._pauses: list[list] = []

    # -- what a scheduler built on this step provides ------------------------------------
    @staticmethod
    def steps_one_by_one(cfg: BatchLimits) -> bool:
        """Whether every step is planned on its own (no fast-forward of identical decode
        steps)."""
        return cfg.exact_steps

    def _new_decoders(self):
        """The running requests that decode: a ``DecodeCohort`` (one token each per step)."""
        return DecodeCohort(self.kv.block_size_tokens, self.gaps.measured_from_s, self._extra)

    def _decode_tokens(self, num_decode: int) -> int:
        """Tokens the decoders take from this step's budget (one each)."""
        return num_decode

    def _unschedule_decoder(self, victim: Request) -> int:
        """Preempt ``victim``, a decoder that already has this step's KV; returns the
        tokens it gives back to the budget."""
        self._preempt(victim, alloc_step=self.step + 1)
        return 1

    def _join(self, req: Request, end_s: float) -> None:
        """``req`` sampled its first token after its prompt (or its recompute) at
        ``end_s`` and decodes from the next step on."""
        req.join_seg = self._segments_done
        blocks = req.num_blocks
        req.num_blocks = 0
        self.cohort.add(req, self.step, blocks)

    @property
    def num_running(self) -> int:
        return len(self.cohort.members) + len(self.prefilling)

    def most_sequences(self) -> int:
        return self.cfg.max_num_seqs

    def open_requests(self) -> list[Request]:
        return self.cohort.materialise(self.step) + self.prefilling + list(self.waiting)

    def reset(self) -> None:
        super().reset()
        self.cohort = self._new_decoders()
        self.prefilling = []
        self._planned_blocks = (-1, 0)
        self._reserved_blocks = 0
        self._reservations.clear()
        self._paused_seg = None
        self._pauses.clear()
        if self._estimate is not None:
            self._estimate = OutputEstimate(self._estimate.max_new_tokens)

    # -- planning -------------------------------------------------------------------
    def _running(self, req: Request) -> bool:
        return req.seq in self.cohort.members or req in self.prefilling

    def _stop_decoding(self, req: Request, now_s: float) -> None:
        # the longest step among the applied segments numbered above the one it joined in
        k = bisect_right(self._gap_seg, req.join_seg)
        if k < len(self._gap_max):
            gap = self._gap_max[k]
            if gap > 0 and not (req.max_itl_s >= gap):
                req.max_itl_s = gap
        req.last_token_s = now_s

    def _preempt(self, victim: Request, alloc_step: int | None = None) -> None:
        if self._extra and victim.seq in self.cohort.members and \
                victim.output_base + self.step >= victim.max_output_tokens:
            self._leave_before_extra_step(victim, alloc_step)
            return
        if victim.seq in self.cohort.members:
            self._stop_decoding(victim, self._now_s)
            self.cohort.remove(victim, self.step, alloc_step)
        else:
            self.prefilling.remove(victim)
        if self._no_evict:
            self._release(victim)
        self.requeue(victim)
        if self._estimate is not None:
            self._estimate.retracted(self.step, len(self.cohort),
                                     self.cohort.output_tokens_at(self.step))

    def _allocate_decode_step(self) -> tuple[bool, bool]:
        """Blocks for one more token of every decoder; returns (preempted,
        stopped) where ``stopped`` means a decoder preempted itself, which ends
        the step's scheduling as vLLM's running loop does. Usually every block is
        free; otherwise the policy (``self.order``) says who goes."""
        if not self.cohort.members or self._take_next_decode_blocks():
            return False, False
        return self.order.make_room_for_decodes()

    def _take_next_decode_blocks(self) -> bool:
        """Take the blocks every decoder needs for the coming step, if that many
        are free (nobody is preempted); False, with nothing taken, if not.

        Between steps the cohort holds exactly the blocks covering this step's
        tokens, so the coming step needs one block per member that reaches a
        block boundary."""
        cohort = self.cohort
        need = cohort.blocks_entering(self.step + 1)
        if need == 0:
            return True
        kv = self.kv
        if need > kv.num_free_blocks:
            return False
        kv.take(need)
        cohort.blocks_held += need
        return True

    def _schedule(self, now_s: float) -> tuple[_Plan, bool]:
        if self._prefill_only and (self.prefilling or self.waiting):
            # prefill first, the decoders waiting (vLLM V0, SGLang without mixed chunks);
            # with nothing to prefill, a decode step
            plan, preempted = self._plan_step(now_s, decoders=False)
            if plan.prefill:
                return plan, preempted
        return self._plan_step(now_s, decoders=True)

    def _plan_step(self, now_s: float, decoders: bool) -> tuple[_Plan, bool]:
        """The next step: the decoders' tokens and what prefill fits beside them, or
        (``decoders`` False) prefill alone."""
        self._now_s = now_s
        if decoders:
            preempted, stopped = self._allocate_decode_step()
            num_decode = len(self.cohort.members)
        else:
            preempted, stopped, num_decode = False, False, 0
        budget = self.cfg.max_num_batched_tokens - self._decode_tokens(num_decode)
        prefill: list[tuple[Request, int]] = []
        i = 0
        while not stopped and i < len(self.prefilling) and budget > 0:
            req = self.prefilling[i]
            num_new = min(req.num_tokens - req.num_computed_tokens, budget, self._chunk_cap)
            while not self.kv.allocate(req, num_new):
                preempted = True
                victim = self.order.victim()
                if victim.seq in self.cohort.members:     # a decoder: it had its KV
                    if not decoders:                      # (not in this step)
                        self._preempt(victim)
                        continue
                    budget += self._unschedule_decoder(victim)
                    num_decode -= 1
                    continue
                done = next((k for k, (r, _) in enumerate(prefill) if r is victim), None)
                if done is not None:                      # already scheduled this step
                    budget += prefill.pop(done)[1]
                    i -= 1
                self._preempt(victim)
                if victim is req:
                    stopped = True
                    break
            else:
                prefill.append((req, num_new))
                if req.prefix_group is not None and not req.is_decoding:
                    self.kv.register_prefix(req, req.num_computed_tokens + num_new)
                budget -= num_new
                i += 1
                continue
            break
        admitted = False
        estimate, pending_tokens, num_admitted = self._estimate, 0, 0
        if estimate is not None and not self.num_running:
            estimate.idle(self.step)
        if not preempted:
            max_seqs, members = self.cfg.max_num_seqs, self.cohort.members
            while (self.waiting and budget > 0
                   and len(members) + len(self.prefilling) < max_seqs):    # num_running
                need = self._whole_need() if self._no_evict else None
                if self._no_evict and need is None:
                    break
                if self._whole_prompt and not self._head_prompt_fits():
                    break
                if estimate is not None and self.num_running and \
                        not self._estimate_fits(pending_tokens, num_admitted):
                    break
                head = self.admit_head(budget, self.cfg.chunked_prefill, self._chunk_cap,
                                       now_s)
                if head is None:
                    break
                req, num_new = head
                if need is not None:
                    self._reservations[req.request_id] = need
                    self._reserved_blocks += need
                req.seq = self._next_seq
                self._next_seq += 1
                self.prefilling.append(req)
                self.order.admitted(req)
                prefill.append((req, num_new))
                if req.prefix_group is not None:
                    self.kv.register_prefix(req, req.num_computed_tokens + num_new)
                budget -= num_new
                admitted = True
                if estimate is not None:
                    pending_tokens += estimate.need_tokens(
                        req.num_tokens - req.num_computed_tokens, req.num_output_tokens)
                    num_admitted += 1
        fast = (not prefill and not preempted and not admitted and num_decode > 0
                and not self._exact)
        return _Plan(prefill, num_decode, fast, paused=not decoders), preempted

    def next_segment(self, now_s: float) -> Segment | None:
        cohort = self.cohort
        if not self.prefilling and not self.waiting:
            if not cohort.members:
                return None
            if not self._exact and self._take_next_decode_blocks():
                # only decoders, and their next blocks are free: the fast-forward
                # ``_schedule`` would plan, without walking its queues
                return self._fast_forward(len(cohort.members))
        plan, _ = self._schedule(now_s)
        if not plan.prefill and not plan.num_decode:
            return None
        if plan.fast_forward:
            return self._fast_forward(plan.num_decode)
        num_tokens = float(plan.num_decode)
        prefill_work = 0.0
        decode_kv = float(self.cohort.kv_tokens_at(self.step + 1)) if plan.num_decode else 0.0
        kv_read = decode_kv
        for req, n in plan.prefill:
            num_tokens += n
            kv_read += req.num_computed_tokens + n
            if req.is_decoding:
                # a recomputed request down to its last token reads like a decode
                decode_kv += req.num_computed_tokens + 1
            else:
                prefill_work += n * (req.num_computed_tokens + n / 2.0)
        num_seqs = plan.num_decode + len(plan.prefill)
        time_s, flops, moved = self.cost.step_scalar(
            num_tokens, float(num_seqs), prefill_work, decode_kv, kv_read)
        time_s += self.wake_s(now_s)
        seg = Segment.single_step(time_s, num_seqs, num_tokens, flops, moved, plan.prefill)
        if plan.paused:
            self._paused_seg = seg
        return seg

    # -- applying a finished segment ----------------------------------------------------
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        prefill: list[tuple[Request, int]] = seg.payload      # the step's prefill chunks
        cohort = self.cohort
        if seg is self._paused_seg:
            self._finish_paused_step(seg, prefill, end_s)
            return
        if num_steps > 1:
            # fast-forwarded decode: step 1's blocks are held, the rest now
            end_step = self.step + num_steps
            planned_step, planned_blocks = self._planned_blocks
            extra = ((planned_blocks if planned_step == end_step else cohort.blocks_at(end_step))
                     - cohort.blocks_held)
            if extra:
                assert extra <= self.kv.num_free_blocks, "fast-forward overran the free blocks"
                self.kv.take(extra)
                cohort.blocks_held += extra
        self.step += num_steps
        self._segments_done += 1
        finished = cohort.pop_finished(self.step)
        extra_done: list[Request] = []
        if self._extra:
            last_s = self._decode_end_s          # when the extra steps' last tokens came
            if finished:
                if num_steps > 1:
                    last_s = start_s + seg.end_offset_s(num_steps - 1)
                extra_done, finished = finished, []
                num_extra = self._end_extra_steps(extra_done, seg, num_steps, last_s)
                if num_extra and num_steps > 1:
                    self.gaps.add_steps(seg.step_end_s, num_steps - 1, num_extra)
            self._decode_end_s = end_s
        longest = seg.step_end_s[0] if num_steps == 1 else seg.step_end_s.max_step_s(num_steps)
        gap_max, gap_seg = self._gap_max, self._gap_seg
        waited = self._after_pauses(seg, num_steps) if self._pauses else 0
        while gap_max and gap_max[-1] <= longest:
            gap_seg.pop()
            gap_max.pop()
        gap_seg.append(self._segments_done)
        gap_max.append(longest)
        if cohort.num_measured > waited:
            # every decoder had a token before these steps: one gap each per step
            self.gaps.add_steps(seg.step_end_s, num_steps, cohort.num_measured - waited)
        for req in finished:
            self._stop_decoding(req, end_s)
            cohort.remove(req, self.step)
        self._apply_prefill(prefill, end_s, finished)
        if extra_done:
            self._complete_all(extra_done, last_s)
        self._complete_all(finished, end_s)

    def _complete_all(self, finished: list[Request], end_s: float) -> None:
        """Complete the requests a step finished, in admission order, as vLLM frees them."""
        if len(finished) > 1:
            finished.sort(key=lambda r: r.seq)
        for req in finished:
            if self._no_evict:
                self._release(req)
            self._complete(req, end_s)

