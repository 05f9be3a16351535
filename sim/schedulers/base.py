"""What a replica's scheduler looks like from the replica's side.

The replica asks ``next_segment(now)`` and gets one of:
- a ``Segment``: one or more engine iterations to run back to back. The
  replica waits ``duration_s`` (the last step's end) and then calls
  ``finish_segment``. An interruptible segment (fast-forwarded identical
  decode steps) may be cut short at the first step boundary after a new
  request arrives, exactly as the step-by-step loop would have admitted it
  there;
- a float: nothing to run before that simulated time (a static batch waiting
  to fill) unless a request arrives first;
- ``None``: idle until a request arrives.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from sim.config.common import StrictModel
from sim.cost.base import IDLE_AFTER_S, CostModel
from sim.cost.steps import StepEnds
from sim.schedulers.gaps import GapHistogram
from sim.entities.kv import KvCacheManager
from sim.entities.request import Request


class Segment:
    """One or more engine iterations run back to back.

    ``step_end_s`` gives the cumulative end offset of each step from the
    segment's start (``StepEnds``, ``LinearStepEnds`` or ``TableRunEnds``).
    Work (tokens, FLOPs, bytes) is linear in the step index,
    ``first + slope·i`` for step i, which holds for the identical decode
    steps of a fast-forward; a segment of unlike steps (a static batch) gives
    its per-step tokens and its totals instead.
    """

    __slots__ = ("step_end_s", "num_seqs", "tokens", "flops", "bytes", "interruptible",
                 "payload", "step_tokens", "totals_all", "num_steps", "duration_s")

    def __init__(self, step_end_s, num_steps: int, duration_s: float, num_seqs: int,
                 tokens: tuple[float, float], flops: tuple[float, float],
                 bytes: tuple[float, float], interruptible: bool = False, payload: Any = None,
                 step_tokens: np.ndarray | None = None,
                 totals_all: tuple[float, float, float] | None = None) -> None:
        """``num_steps`` and ``duration_s`` (the last step's end) are
        ``len(step_end_s)`` and ``step_end_s[-1]``, which the caller knows."""
        self.step_end_s = step_end_s
        self.num_seqs = num_seqs
        self.tokens = tokens
        self.flops = flops
        self.bytes = bytes
        self.interruptible = interruptible
        self.payload = payload
        self.step_tokens = step_tokens
        self.totals_all = totals_all
        self.num_steps = num_steps
        self.duration_s = duration_s

    @classmethod
    def single_step(cls, time_s: float, num_seqs: int, tokens: float, flops: float,
                    bytes_: float, payload: Any) -> "Segment":
        return cls(StepEnds((time_s,)), 1, time_s, num_seqs, (tokens, 0.0), (flops, 0.0),
                   (bytes_, 0.0), False, payload)

    def end_offset_s(self, num_steps: int) -> float:
        """When the first ``num_steps`` steps end, from the segment's start."""
        if num_steps == self.num_steps:
            return self.duration_s
        return float(self.step_end_s[num_steps - 1])

    def steps_ended_by(self, elapsed_s: float) -> int:
        """Steps whose end is at or before ``elapsed_s``."""
        return self.step_end_s.count_before(elapsed_s, True)

    def totals(self, num_steps: int) -> tuple[float, float, float]:
        """(tokens, FLOPs, bytes) of the first ``num_steps`` steps."""
        if self.totals_all is not None and num_steps == self.num_steps:
            return self.totals_all
        if num_steps == 1:
            return self.tokens[0], self.flops[0], self.bytes[0]
        tri = num_steps * (num_steps - 1) / 2.0
        return (num_steps * self.tokens[0] + self.tokens[1] * tri,
                num_steps * self.flops[0] + self.flops[1] * tri,
                num_steps * self.bytes[0] + self.bytes[1] * tri)

    def tokens_of_step(self, k: int) -> float:
        if self.step_tokens is not None:
            return float(self.step_tokens[k])
        return self.tokens[0] + self.tokens[1] * k


Problem = tuple[tuple, str]       # (location under the scheduler block, message)


class SchedulerConfigBase(StrictModel):
    """The config every scheduling policy's ``type:`` block extends: what the checks and
    the composition root may ask of a policy before it is built, without naming it. A
    policy overrides the answers it has."""

    # whether the step terms a profile measured on a whole engine describe this policy's
    # steps (the engine's own continuous or single-sequence scheduling)
    engine_terms_apply: ClassVar[bool] = False

    @property
    def draft_model_name(self) -> str | None:
        """A second model whose weights and KV the pool's GPUs hold beside the target's
        (a draft model), whose cost model the composition root builds; None for none."""
        return None

    def with_engine(self, engine, measured_on_engine: bool = False) -> "SchedulerConfigBase":
        """These settings with what they leave to the pool's engine (an
        :class:`~sim.config.engines.EnginePreset`) filled in; ``measured_on_engine``: the
        pool's step times were measured on the whole engine (its own pipelining is in
        them)."""
        return self

    def problems(self, engine, duration_s: float) -> list[Problem]:
        """Settings this policy would ignore under ``engine``, or over a run whose last
        arrival comes at ``duration_s``."""
        return []


@dataclass
class ReplicaLimits:
    """Limits a request is checked against before it may wait for this replica."""

    max_model_len: int


class Scheduler(ABC):
    """Base: a FCFS waiting queue, a KV cache and the cost model of the replica.

    Slotted (as are the replica, its KV cache and the decode cohort): a large
    fleet's per-replica state is touched once per event, long after it was
    last used, so each object's attributes lie inline with it rather than in a
    separate dict."""

    __slots__ = ("kv", "cost", "limits", "on_finish", "waiting", "running", "last_step_end_s",
                 "_servable", "gaps")

    @classmethod
    def pool_parts(cls, rng: np.random.Generator, draft_cost: CostModel | None) -> dict:
        """Constructor arguments this policy takes from its pool beyond the common ones
        (the pool's random stream; the cost model of its config's draft model, which the
        composition root builds); none unless a policy says so."""
        return {}

    def __init__(self, kv: KvCacheManager, cost: CostModel, limits: ReplicaLimits,
                 on_finish: Callable[[Request], None],
                 gaps: GapHistogram | None = None) -> None:
        self.kv = kv
        self.cost = cost
        self.limits = limits
        self.on_finish = on_finish
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.last_step_end_s = -math.inf      # segment_ended: when its last step ended
        self._servable: int | None = None     # the longest sequence every limit passes
        # where the gaps between consecutive output tokens of the requests it serves are
        # counted: the run's pooled inter-token latencies (its own where none is given)
        self.gaps = gaps if gaps is not None else GapHistogram()

    def most_sequences(self) -> int:
        """The most sequences one step holds (one, unless a policy batches)."""
        return 1

    # -- admission -------------------------------------------------------------
    def reject_reason(self, req: Request) -> str | None:
        """Why ``req`` can never be served here, or None."""
        total = req.prompt_tokens + req.max_output_tokens
        if total <= self.servable_tokens():
            return None
        return next(reason for reason, most in self._token_limits() if total > most)

    def servable_tokens(self) -> int:
        """The longest sequence (prompt + output) every limit passes."""
        servable = self._servable
        if servable is None:
            # the schedulers' limits are fixed once they are built
            servable = self._servable = min(most for _, most in self._token_limits())
        return servable

    def binding_limit(self) -> tuple[str, int]:
        """(reason, tokens) of the tightest limit on prompt + output."""
        return min(self._token_limits(), key=lambda limit: limit[1])

    def _token_limits(self) -> list[tuple[str, int]]:
        """(reason, longest sequence allowed) of each limit a request is refused for,
        in the order they are reported."""
        limits = [("exceeds_max_model_len", self.limits.max_model_len),
                  ("exceeds_kv_capacity", self.kv.capacity_tokens)]
        cfg = getattr(self, "cfg", None)
        if cfg is not None and getattr(cfg, "chunked_prefill", True) is False:
            # without chunking, a preempted request recomputes prompt + output in one step
            limits.append(("exceeds_token_budget", cfg.max_num_batched_tokens))
        return limits

    def admit_head(self, budget: int, chunked_prefill: bool, chunk_cap: int,
                   now_s: float) -> tuple[Request, int] | None:
        """Take the head of the waiting queue with its first chunk (after any
        prefix-cache hit), or None when it does not fit the budget or the KV
        cache. The caller adds it to its running set."""
        req = self.waiting[0]
        kv = self.kv
        hit = kv.hit_blocks(req) if req.num_computed_tokens == 0 else 0
        num_new = req.num_tokens - max(req.num_computed_tokens, hit * kv.block_size_tokens)
        if num_new > budget and not chunked_prefill:
            return None
        num_new = min(num_new, budget, chunk_cap)
        admitted = kv.admit(req, hit, num_new)
        if admitted is None:
            return None
        if req.num_computed_tokens == 0:        # first admission, or after a preemption
            req.num_computed_tokens = admitted.cached_tokens
            req.cached_prompt_tokens = admitted.shared_prefix_tokens
        self.waiting.popleft()
        if math.isnan(req.admitted_s):
            req.admitted_s = now_s
        return req, num_new

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def requeue(self, victim: Request) -> None:
        """Preemption by recompute, once the policy has taken ``victim`` off its running
        set: its KV goes back, its progress is lost and it waits at the head of the queue."""
        self.kv.preempt(victim)
        victim.num_computed_tokens = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + self.num_running

    def reset(self) -> None:
        """Forget every request (the replica was lost); the KV cache is empty."""
        self.waiting.clear()
        self.running = []
        self.kv.clear()

    def open_requests(self) -> list[Request]:
        """Requests not yet terminal, with their token counts up to date."""
        return list(self.running) + list(self.waiting)

    # -- the step loop ----------------------------------------------------------
    def segment_ended(self, now_s: float) -> None:
        """The replica's running segment has ended at ``now_s`` (its last step's end)."""
        self.last_step_end_s = now_s

    def wake_s(self, now_s: float) -> float:
        """What the cost model adds to a step starting at ``now_s`` after the engine sat
        idle (no step since IDLE_AFTER_S or more; a new replica counts as idle)."""
        extra = self.cost.after_idle_s
        return extra if extra and now_s - self.last_step_end_s >= IDLE_AFTER_S else 0.0

    @abstractmethod
    def next_segment(self, now_s: float) -> Segment | float | None: ...

    def kv_used_blocks_during(self, seg: Segment, steps_done: int) -> int:
        """KV blocks in use after ``steps_done`` steps of a running segment."""
        return self.kv.num_used_blocks

    @abstractmethod
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        """Apply the first ``num_steps`` steps of ``seg``, run from ``start_s`` to
        ``end_s`` (= start_s + seg.end_offset_s(num_steps), which the replica
        has computed already)."""

    def _complete(self, req: Request, finish_s: float) -> None:
        self.kv.free(req)
        req.finish_s = finish_s
        self.on_finish(req)
