"""Static batching: gather a batch, run it until its longest request ends.

A batch closes when it reaches ``batch_size`` or when its oldest request has
waited ``batch_timeout``. Prompts are padded to the batch's longest and every
sequence keeps its slot (and its KV reservation) until the longest output is
done, as a plain ``generate()`` over a padded batch does. This waste is what
continuous batching removes. Tokens stream: a request's first token comes
after the batch prefill and its finish is its own last token, but its slot is
only freed with the batch.
"""
from __future__ import annotations

import itertools
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from sim.config.common import PositiveInt, Seconds
from sim.cost.shape import BatchShape
from sim.entities.kv import blocks_for
from sim.entities.request import Request
from sim.schedulers.base import Problem, Scheduler, SchedulerConfigBase, Segment, StepEnds


class StaticConfig(SchedulerConfigBase):
    type: Literal["static"] = "static"
    engine_terms_apply: ClassVar[bool] = False
    batch_size: PositiveInt = Field(8, description="Largest batch")
    batch_timeout: Seconds = Field(
        0.05, description="Longest time the oldest waiting request waits for the batch to fill")

    def problems(self, engine, duration_s: float) -> list[Problem]:
        if self.batch_timeout >= duration_s:
            return [(("batch_timeout",), f"a batch that is not full would wait "
                     f"{self.batch_timeout:g} s, past the last arrival (duration "
                     f"{duration_s:g} s): shorten batch_timeout")]
        return []


class StaticScheduler(Scheduler):
    batch_size: int
    batch_timeout_s: float

    def __init__(self, cfg: StaticConfig, **kwargs) -> None:
        super().__init__(**kwargs)
        self.batch_size = cfg.batch_size
        self.batch_timeout_s = cfg.batch_timeout

    def most_sequences(self) -> int:
        return self.batch_size

    def _take_batch(self) -> list[Request]:
        """FCFS requests whose padded reservations fit the KV cache together."""
        batch: list[Request] = []
        max_prompt = max_output = 0
        for req in self.waiting:
            if len(batch) == self.batch_size:
                break
            p, o = max(max_prompt, req.prompt_tokens), max(max_output, req.max_output_tokens)
            need = (len(batch) + 1) * blocks_for(p + o, self.kv.block_size_tokens)
            if need > self.kv.num_free_blocks:
                break
            batch.append(req)
            max_prompt, max_output = p, o
        return batch

    def next_segment(self, now_s: float) -> Segment | float | None:
        if self.running or not self.waiting:
            return None
        # A request that waited through a running batch does not wait again.
        deadline = self.waiting[0].arrival_s + self.batch_timeout_s
        if len(self.waiting) < self.batch_size and now_s < deadline:
            return deadline
        batch = self._take_batch()
        for _ in batch:
            self.waiting.popleft()
        return self._plan(batch, now_s)

    def _plan(self, batch: list[Request], now_s: float) -> Segment:
        n = len(batch)
        max_prompt = max(r.prompt_tokens for r in batch)
        max_output = max(r.max_output_tokens for r in batch)
        per_seq_tokens = max_prompt + max_output
        for req in batch:
            req.admitted_s = now_s
            req.num_blocks = blocks_for(per_seq_tokens, self.kv.block_size_tokens)
            self.kv.take(req.num_blocks)
        self.running = batch
        # step 0: padded prefill; steps 1..max_output-1: decode of the whole batch
        num_steps = max_output
        j = np.arange(num_steps, dtype=np.float64)
        is_prefill = j == 0
        shape = BatchShape(
            num_tokens=np.where(is_prefill, n * max_prompt, n).astype(np.float64),
            num_seqs=np.full(num_steps, float(n)),
            prefill_attn_work=np.where(is_prefill, n * BatchShape.prefill_work(max_prompt, 0), 0.0),
            decode_kv_tokens=np.where(is_prefill, 0.0, n * (max_prompt + j)),
        )
        cost = self.cost.step(shape)
        tokens = np.asarray(shape.num_tokens)
        times = np.array(cost.time_s, dtype=np.float64)
        times[0] += self.wake_s(now_s)
        ends = StepEnds(np.cumsum(times).tolist())
        return Segment(ends, len(ends), ends[-1], n, tokens=(0.0, 0.0), flops=(0.0, 0.0),
                       bytes=(0.0, 0.0), payload=batch, step_tokens=tokens,
                       totals_all=(float(tokens.sum()), float(np.sum(cost.flops)),
                                   float(np.sum(cost.bytes))))

    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        batch: list[Request] = seg.payload
        first_token_s = start_s + seg.step_end_s[0]
        for req in batch:
            req.first_token_s = first_token_s
            req.num_computed_tokens = req.total_tokens
            req.num_output_tokens = req.max_output_tokens
        self.running = []
        ends = seg.step_end_s
        # decode step k's length (from k = 1, at [k - 1]), and the longest up to it
        lengths = [ends[k] - ends[k - 1]
                   for k in range(1, max(r.max_output_tokens for r in batch))]
        longest = list(itertools.accumulate(lengths, max))
        self._record_gaps(batch, lengths)
        for req in batch:
            if req.max_output_tokens > 1:
                # the gaps between its tokens are the decode steps up to its last one
                req.max_itl_s = longest[req.max_output_tokens - 2]
            self._complete(req, start_s + ends[req.max_output_tokens - 1])

    def _record_gaps(self, batch: list[Request], lengths: list[float]) -> None:
        """Decode step k (from 1; its length ``lengths[k - 1]``) is a gap of each request
        after the warm-up still producing tokens then (more than k output tokens)."""
        gaps = self.gaps
        outputs = sorted(r.max_output_tokens for r in batch if gaps.measured(r.arrival_s))
        i = 0
        for k in range(1, outputs[-1] if outputs else 0):
            while outputs[i] <= k:
                i += 1
            gaps.add(lengths[k - 1], len(outputs) - i)
