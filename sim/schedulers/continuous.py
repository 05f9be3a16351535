"""Iteration-level (continuous) batching with a paged KV cache, vLLM V1 style.

One step: a token budget counts down; running requests are scheduled first
(each catches its computed tokens up to its known tokens, a prefill chunk or
one decode token), preempting the last running request by recompute when a
KV block cannot be had; waiting requests are admitted only if nothing was
preempted this step. With chunked prefill off, a prompt must fit the budget
whole.

Fast-forward: when a step is decode-only over every running request and
nothing was preempted, the next steps are identical except that each reads
one more KV token per sequence. They are planned together up to the first
completion or the first step whose KV blocks would run out, as one
interruptible segment; an arrival cuts it at the next step boundary. The
per-request results equal those of ``exact_steps: true``.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.config.common import PositiveInt, StrictModel
from sim.cost.shape import BatchShape
from sim.request import Request
from sim.schedulers.base import Scheduler, Segment


class ContinuousConfig(StrictModel):
    type: Literal["continuous"] = "continuous"
    max_num_batched_tokens: PositiveInt = Field(
        8192, description="Token budget of one step (prefill chunks + decode tokens)")
    max_num_seqs: PositiveInt = Field(256, description="Most sequences in one step")
    chunked_prefill: bool = Field(True, description="Split long prompts across steps")
    exact_steps: bool = Field(
        False, description="Simulate every decode step instead of fast-forwarding identical ones")

    @model_validator(mode="after")
    def _check(self) -> "ContinuousConfig":
        if self.max_num_batched_tokens < self.max_num_seqs and not self.chunked_prefill:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
        return self


class ContinuousScheduler(Scheduler):
    def __init__(self, cfg: ContinuousConfig, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg

    def reject_reason(self, req: Request) -> str | None:
        reason = super().reject_reason(req)
        if reason is None and not self.cfg.chunked_prefill \
                and req.total_tokens > self.cfg.max_num_batched_tokens:
            # a preempted request recomputes prompt + output in one step
            reason = "exceeds_token_budget"
        return reason

    # -- planning -------------------------------------------------------------
    def _preempt(self, victim: Request) -> None:
        self.kv.free(victim)
        victim.num_computed_tokens = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def _schedule(self, now_s: float) -> tuple[list[tuple[Request, int]], bool]:
        budget = self.cfg.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.num_tokens - req.num_computed_tokens, budget)
            while not self.kv.allocate(req, num_new):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            else:
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
                continue
            break  # the request itself was preempted: it was the last running one
        if preempted:
            return scheduled, True
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            num_new = req.num_tokens - req.num_computed_tokens
            if num_new > budget and not self.cfg.chunked_prefill:
                break
            num_new = min(num_new, budget)
            if not self.kv.allocate(req, num_new):
                break
            self.waiting.popleft()
            self.running.append(req)
            if math.isnan(req.admitted_s):
                req.admitted_s = now_s
            scheduled.append((req, num_new))
            budget -= num_new
        return scheduled, False

    def next_segment(self, now_s: float) -> Segment | None:
        if not self.running and not self.waiting:
            return None
        scheduled, preempted = self._schedule(now_s)
        if not scheduled:
            return None
        decode_only = all(req.is_decoding for req, _ in scheduled)
        if decode_only and not preempted and not self.cfg.exact_steps \
                and len(scheduled) == len(self.running):
            return self._fast_forward(scheduled)
        num_tokens = prefill_work = decode_kv = 0.0
        for req, n in scheduled:
            num_tokens += n
            if req.is_decoding:
                decode_kv += req.num_computed_tokens + 1
            else:
                prefill_work += BatchShape.prefill_work(n, req.num_computed_tokens)
        shape = BatchShape(num_tokens=np.array([num_tokens]),
                           num_seqs=np.array([float(len(scheduled))]),
                           prefill_attn_work=np.array([prefill_work]),
                           decode_kv_tokens=np.array([decode_kv]))
        cost = self.cost.step(shape)
        return Segment(step_end_s=np.asarray(cost.time_s, dtype=np.float64).reshape(1),
                       num_tokens=np.array([num_tokens]), flops=np.atleast_1d(cost.flops),
                       bytes=np.atleast_1d(cost.bytes), num_seqs=len(scheduled),
                       payload=scheduled)

    def _fast_forward(self, scheduled: list[tuple[Request, int]]) -> Segment:
        """Plan every identical decode step up to a finish or a KV shortfall."""
        reqs = [req for req, _ in scheduled]
        remaining = min(r.max_output_tokens - r.num_output_tokens for r in reqs)
        num_steps = self._steps_within_free_blocks(reqs, remaining)
        n = len(reqs)
        kv_first = float(sum(r.num_computed_tokens + 1 for r in reqs))
        steps = np.arange(num_steps, dtype=np.float64)
        shape = BatchShape(num_tokens=np.full(num_steps, float(n)),
                           num_seqs=np.full(num_steps, float(n)),
                           prefill_attn_work=np.zeros(num_steps),
                           decode_kv_tokens=kv_first + steps * n)
        cost = self.cost.step(shape)
        return Segment(step_end_s=np.cumsum(cost.time_s), num_tokens=shape.num_tokens,
                       flops=np.asarray(cost.flops), bytes=np.asarray(cost.bytes),
                       num_seqs=n, interruptible=num_steps > 1, payload=scheduled)

    def _steps_within_free_blocks(self, reqs: list[Request], max_steps: int) -> int:
        """Largest j <= max_steps such that steps 2..j need at most the free blocks.

        Step 1's blocks are already allocated. After j steps sequence s holds
        c_s + j tokens of KV and needs ceil((c_s + j) / B) blocks.
        """
        bs = self.kv.block_size_tokens
        computed = np.array([r.num_computed_tokens for r in reqs], dtype=np.int64)
        held = np.array([r.num_blocks for r in reqs], dtype=np.int64)
        free = self.kv.num_free_blocks

        def extra(j: int) -> int:
            return int(np.maximum(-(-(computed + j) // bs) - held, 0).sum())

        if extra(max_steps) <= free:
            return max_steps
        lo, hi = 1, max_steps  # extra(lo) <= free < extra(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if extra(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    # -- applying a finished segment ---------------------------------------------
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float) -> None:
        scheduled: list[tuple[Request, int]] = seg.payload
        end_s = start_s + seg.step_end_s[num_steps - 1]
        finished: list[Request] = []
        for req, n in scheduled:
            if num_steps > 1:
                # fast-forwarded decode: step 1 is allocated, the rest now
                ok = self.kv.allocate(req, num_steps)
                assert ok, "fast-forward planned more blocks than were free"
                req.num_computed_tokens += num_steps
                req.num_output_tokens += num_steps
            else:
                req.num_computed_tokens += n
                if req.num_computed_tokens == req.num_tokens:
                    req.num_output_tokens += 1
                    if req.num_output_tokens == 1:
                        req.first_token_s = end_s
            if req.done:
                finished.append(req)
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for req in finished:
                self._complete(req, end_s)
