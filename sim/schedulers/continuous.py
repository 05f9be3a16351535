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
gates and the FCFS/priority policy stay this module's.

Why one module of about 480 lines: planning a step, fast-forwarding the decode cohort
and the KV admission gates share per-step state that the hot loop reads on every step;
the part that is a policy of its own (FCFS or priority) is ``ordering.py``'s.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sim.config.common import Flag, PositiveInt, PositiveSeconds
from sim.entities.kv import blocks_for
from sim.entities.request import Request
from sim.schedulers.base import Problem, Scheduler, SchedulerConfigBase, Segment
from sim.schedulers.cohort import DecodeCohort
from sim.schedulers.ordering import ORDERS
from sim.schedulers.output_estimate import OutputEstimate


class BatchLimits(SchedulerConfigBase):
    """The limits and policies of the continuous step, shared by every scheduler built on
    it (``continuous``, ``speculative``)."""

    max_num_batched_tokens: PositiveInt = Field(
        8192, description="Token budget of one step (prefill chunks + decode tokens, draft "
                          "tokens included)")
    max_num_seqs: PositiveInt = Field(256, description="Most sequences in one step")
    chunked_prefill: Flag = Field(True, description="Split long prompts across steps")
    long_prefill_token_threshold: PositiveInt | None = Field(
        None, description="Largest prefill chunk one request may take in a step (keeps a "
                          "long prompt from filling the budget and stalling decodes)")
    policy: Literal["fcfs", "priority"] = Field(
        "fcfs", description="Waiting order and preemption victim: arrival order, or request "
                            "priority (lower first; the victim is the largest priority, "
                            "latest arrival)")
    priority_aging: PositiveSeconds | None = Field(
        None, description="Starvation guard for the priority policy: a waiting request "
                          "gains one priority level per this much waiting")
    kv_admission: Literal["on_demand", "whole_prompt", "guaranteed_no_evict",
                          "estimated_output"] | None = Field(
        None, description="on_demand (vLLM before its full-prompt gate): KV "
                          "blocks are taken as tokens are computed and a request is "
                          "preempted when they run out; estimated_output (SGLang's "
                          "PrefillAdder): the same, but a waiting request is admitted only "
                          "when the free KV holds its prompt and output to come beside a "
                          "share (SGLang's new_token_ratio) of every running request's "
                          "output to come (schedulers/output_estimate.py); whole_prompt (vLLM 0.32's "
                          "scheduler_reserve_full_isl, on by default there): the same, but "
                          "a waiting request is admitted only when the free blocks hold "
                          "its whole prompt (less its prefix-cache hit), not only its "
                          "first chunk; guaranteed_no_evict (TensorRT-LLM's default capacity "
                          "scheduler): a request is admitted only when the cache can "
                          "hold its whole prompt and output beside every running "
                          "request's, so none is ever preempted; unset: the pool's "
                          "engine's")
    max_new_tokens: PositiveInt | None = Field(
        None, description="The clients' cap on a request's output tokens (their max_tokens), "
                          "which kv_admission estimated_output reserves room for; unset: "
                          "4,096, SGLang's estimate of an uncapped request")
    prefill_only_steps: bool | None = Field(
        None, description="true: a step that prefills runs no decode, the running decodes "
                          "wait for it (vLLM V0's default scheduler, without chunked "
                          "prefill; SGLang unless --enable-mixed-chunk); false: prefill "
                          "chunks and decodes share a step (vLLM V1, TensorRT-LLM's "
                          "in-flight batching); unset: the pool's engine's")
    finished_extra_step: bool | None = Field(
        None, description="true: a request whose last token came with step k decodes once "
                          "more in step k+1 (its token thrown away), keeping its batch slot "
                          "and KV blocks to k+1's end, as a scheduler that forms step k+1 "
                          "before reading step k's tokens does (vLLM async scheduling and "
                          "V0's async output processing, SGLang's and TensorRT-LLM's overlap "
                          "schedulers); false: it leaves at k's end; unset: the pool's "
                          "engine's")

    @model_validator(mode="after")
    def _check_limits(self) -> "BatchLimits":
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                             f"at least max_num_seqs ({self.max_num_seqs})")
        if self.long_prefill_token_threshold is not None and not self.chunked_prefill:
            raise ValueError("long_prefill_token_threshold caps prefill chunks, and "
                             "chunked_prefill: false takes none: remove one of them")
        if self.long_prefill_token_threshold is not None and \
                self.long_prefill_token_threshold >= self.max_num_batched_tokens:
            raise ValueError(f"long_prefill_token_threshold ({self.long_prefill_token_threshold})"
                             f" is not below max_num_batched_tokens "
                             f"({self.max_num_batched_tokens}): it would never cap a chunk")
        if self.priority_aging is not None and self.policy != "priority":
            raise ValueError("priority_aging ages priorities, which policy 'fcfs' ignores: "
                             "add policy: priority or remove priority_aging")
        return self

    def with_engine(self, engine, measured_on_engine: bool = False) -> "BatchLimits":
        """The engine's KV admission, prefill-only steps and finished request's extra step
        where these settings leave them unset (``null``, the default); no extra step when
        the step times were measured on the whole engine (as with its join rule: the
        measured engine's own pipelining holds it)."""
        update = {}
        if self.kv_admission is None:
            update["kv_admission"] = engine.kv_admission
        if self.prefill_only_steps is None:
            update["prefill_only_steps"] = engine.prefill_only_steps
        if self.finished_extra_step is None:
            update["finished_extra_step"] = (engine.finished_extra_steps == 1
                                             and not measured_on_engine)
        return self.model_copy(update=update) if update else self

    def problems(self, engine, duration_s: float) -> list[Problem]:
        admission = self.kv_admission or engine.kv_admission
        if self.max_new_tokens is not None and admission != "estimated_output":
            return [(("max_new_tokens",), f"max_new_tokens is the cap kv_admission "
                     f"estimated_output reserves room for; this pool admits {admission} "
                     f"(engine {engine.name}@{engine.version}), which never reads it: remove it or set "
                     "kv_admission: estimated_output")]
        return []


class ContinuousConfig(BatchLimits):
    type: Literal["continuous"] = "continuous"
    engine_terms_apply: ClassVar[bool] = True
    exact_steps: Flag = Field(
        False, description="Simulate every decode step instead of fast-forwarding identical ones")


class _Plan:
    __slots__ = ("prefill", "num_decode", "fast_forward", "paused")

    def __init__(self, prefill, num_decode, fast_forward, paused=False):
        self.prefill: list[tuple[Request, int]] = prefill
        self.num_decode: int = num_decode
        self.fast_forward: bool = fast_forward
        self.paused: bool = paused          # a prefill-only step: the decoders wait


_NO_PREFILL: list[tuple[Request, int]] = []      # the payload of decode-only segments; never mutated


class ContinuousScheduler(Scheduler):
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

    def _release(self, req: Request) -> None:
        """Give back what guaranteed_no_evict promised ``req`` (it finished or left)."""
        self._reserved_blocks -= self._reservations.pop(req.request_id, 0)

    def _whole_need(self) -> int | None:
        """guaranteed_no_evict: the blocks the head's whole sequence needs, or None when
        they do not fit beside every promise."""
        need = blocks_for(self.waiting[0].total_tokens + self._extra, self.kv.block_size_tokens)
        return need if self._reserved_blocks + need <= self.kv.num_blocks else None

    def _head_prompt_fits(self) -> bool:
        """whole_prompt: whether the free blocks hold the waiting head's whole known
        sequence (prompt, and output so far after a preemption) beyond its prefix-cache
        hit, counting the evictable hit blocks it would pin."""
        req, kv = self.waiting[0], self.kv
        hit = kv.hit_blocks(req) if req.num_computed_tokens == 0 else 0
        tokens = min(req.num_tokens, self.limits.max_model_len)
        need = blocks_for(tokens, kv.block_size_tokens) - hit + (
            kv.pinned_by(req, hit) if hit else 0)
        return need <= kv.num_free_blocks

    def _estimate_fits(self, pending_tokens: int, num_admitted: int) -> bool:
        """estimated_output: whether the waiting head's need, beside ``pending_tokens``
        (the needs of the ``num_admitted`` admitted this step, the tail of the prefilling
        ones), is below the free KV less every running request's reserve (a prefilling
        one's also holds its prompt still to compute)."""
        est, step, kv = self._estimate, self.step, self.kv
        prefilling = self.prefilling[:len(self.prefilling) - num_admitted]
        num_running = len(self.cohort) + len(prefilling)
        output = self.cohort.output_tokens_at(step) + sum(r.num_output_tokens
                                                          for r in prefilling)
        reserve = est.reserve_tokens(step, num_running, output) + sum(
            r.num_tokens - r.num_computed_tokens for r in prefilling)
        head = self.waiting[0]
        need = est.need_tokens(head.num_tokens - head.num_computed_tokens,
                               head.num_output_tokens)
        return need + pending_tokens < kv.num_free_blocks * kv.block_size_tokens - reserve

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

    def _leave_before_extra_step(self, req: Request, alloc_step: int | None) -> None:
        """A finished request chosen to make room before its extra step: it has all its
        tokens (the last at the decode step just ended), so it leaves, not requeued."""
        self._stop_decoding(req, self._decode_end_s)
        self.cohort.remove(req, self.step, alloc_step)
        if self._no_evict:
            self._release(req)
        self._complete(req, self._decode_end_s)

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

    def _complete_all(self, finished: list[Request], end_s: float) -> None:
        """Complete the requests a step finished, in admission order, as vLLM frees them."""
        if len(finished) > 1:
            finished.sort(key=lambda r: r.seq)
        for req in finished:
            if self._no_evict:
                self._release(req)
            self._complete(req, end_s)

    def _apply_prefill(self, prefill: list[tuple[Request, int]], end_s: float,
                       finished: list[Request]) -> None:
        """Advance each prefill chunk of a finished step; a request whose prompt (or
        recompute) is done samples a token and joins the decoders, or is appended to
        ``finished`` when that was its last."""
        joined: list[Request] = []
        kv = self.kv
        for req, n in prefill:
            req.num_computed_tokens += n
            if req.prefix_group is not None:
                kv.register_prefix(req)
            if req.num_computed_tokens == req.prompt_tokens + req.num_output_tokens:  # num_tokens
                req.num_output_tokens += 1
                if req.num_output_tokens == 1:
                    req.first_token_s = end_s
                joined.append(req)
        if not joined:
            return
        if len(joined) == len(self.prefilling):
            self.prefilling = []           # usually every prefill finished
        else:
            keep = set(map(id, joined))
            self.prefilling = [r for r in self.prefilling if id(r) not in keep]
        for req in joined:
            if req.last_token_s == req.last_token_s:           # resumed after preemption
                gap = end_s - req.last_token_s
                if not (req.max_itl_s >= gap):
                    req.max_itl_s = gap
                if self.gaps.measured(req.arrival_s):
                    self.gaps.add(gap)
            if req.done:
                finished.append(req)
            else:
                self._join(req, end_s)
