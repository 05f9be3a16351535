"""Continuous batching with speculative decoding, vLLM V1 style.

The step is the continuous one (running requests first within a token
budget, the last running request preempted by recompute when a KV block
cannot be had, waiting requests admitted only if nothing was preempted),
transcribed per request: one ``running`` list, each request allocated on
its own. Prefill chunks are scheduled exactly as without speculation,
prefix-cache hits included (a waiting request starts from its group's cached
blocks and registers the shared blocks it computes, as the continuous
scheduler does).

A decoding sequence instead schedules a verify pass of ``1 + k'`` tokens:
its last sampled token plus ``k'`` draft tokens, where ``k'`` is
``num_speculative_tokens`` cut down to what the remaining token budget
allows and to the output tokens the request still needs (no draft past the
last token, so a sequence never reserves KV beyond ``prompt + max_output``).
All ``1 + k'`` tokens count against the budget and get KV slots, reserved
for the step. After the step the sequence gains ``1 + j`` tokens, where
``j`` is the number of leading drafts accepted: each is accepted with
probability α (``acceptance_rate``), independently, until the first
rejection, so P(j) = α^j·(1 − α) for j < k' and P(k') = α^k'. The mean gain
per step with full drafts is (1 − α^(k+1)) / (1 − α). Computed and output
tokens both advance by the gain, and the slots of the rejected drafts are
released: the sequence keeps the blocks its real length needs (less the
prefix-cache blocks it shares).

Draws come from a numpy Generator (``rng``), one per decoding sequence per
step, in running order, so a run is reproducible for a fixed seed. Because
every decode step's outcome is random, there is no fast-forward: steps are
planned and simulated one by one.

Step time = draft cost + target cost.

- Target: ``cost.step_scalar(tokens, rows, prefill_work, decode_kv)`` with
  ``tokens`` the scheduled tokens (drafts included); ``rows`` the logit rows
  (one per sequence plus one per draft: the verify pass samples every
  position, so the LM head and per-sequence sampling work scale with it);
  and, for each decoding sequence of context ``c`` (computed tokens),
  ``decode_kv += c + 1``: the verify pass reads the sequence's KV once for all
  its 1 + k' query tokens (attention kernels share one load between a
  sequence's queries), and the k' draft positions add attention arithmetic
  like a prefill chunk of k' tokens over that context.
- Draft, ``proposer: draft_model``: ``max k'`` sequential decode steps of the
  draft model (its own roofline cost model on the same GPUs, tp and dtypes,
  see ``build_draft_cost``); draft step i runs the sequences still drafting
  (k' > i), each reading ``c + 1 + i`` tokens of its own KV. A step with
  prefill chunks also runs the draft model over them (a prefill of the same
  tokens). The draft model's weights and KV are not taken from the pool's KV
  budget.
- Draft, ``proposer: ngram``: a fixed CPU cost ``ngram_cost_s`` per step that
  drafts any token (prompt lookup, no GPU work).

Counters for measurement: ``num_steps``, ``num_decode_seq_steps`` (decoding
sequence-steps), ``num_draft_tokens`` (drafts scheduled) and
``num_accepted_tokens`` (tokens gained by decoding sequences, the bonus
token included), so ``num_accepted_tokens / num_decode_seq_steps`` is the
measured mean tokens per decode step per sequence.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from sim.config import profiles
from sim.config.common import Flag, Name, PositiveInt, Seconds, StrictModel
from sim.config.specs import ModelSpec
from sim.cost.base import CostModel
from sim.cost.shape import BatchShape
from sim.core.kv import blocks_for
from sim.core.request import Request
from sim.schedulers.base import Scheduler, Segment

if TYPE_CHECKING:
    from sim.config.resolve import ResolvedPool


NGRAM_COST_S = 0.0002         # the n-gram proposer's CPU time per step, by default


class SpeculativeConfig(StrictModel):
    type: Literal["speculative"] = "speculative"
    # whether the step terms a profile measured on a whole engine describe this policy's
    # steps (the engine's own continuous or single-sequence scheduling)
    engine_terms_apply: ClassVar[bool] = False
    max_num_batched_tokens: PositiveInt = Field(
        8192, description="Token budget of one step (prefill chunks + verify tokens, drafts "
                          "included)")
    max_num_seqs: PositiveInt = Field(256, description="Most sequences in one step")
    chunked_prefill: Flag = Field(True, description="Split long prompts across steps")
    num_speculative_tokens: PositiveInt = Field(
        4, le=64, description="Draft tokens proposed per decoding sequence per step (k, at "
                              "most 64)")
    proposer: Literal["draft_model", "ngram"] = Field(
        "draft_model", description="Where drafts come from: a small draft model, or n-gram "
                                   "lookup in the prompt")
    draft_model: Name | None = Field(
        None, description="Model profile of the draft model (shipped or under `models:`); "
                          "required with proposer: draft_model")
    acceptance_rate: float = Field(
        gt=0.0, lt=1.0, description="Probability that each draft token is accepted, "
                                    "independently, until the first rejection")
    ngram_cost_s: Seconds = Field(
        NGRAM_COST_S, le=10.0, description="CPU time of the n-gram proposer per step (at most "
                                     "10 s)")

    @property
    def draft_model_name(self) -> str | None:
        """The model whose weights and KV the pool's GPUs hold beside the target's."""
        return self.draft_model if self.proposer == "draft_model" else None

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfig":
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                             f"at least max_num_seqs ({self.max_num_seqs})")
        if self.proposer == "draft_model" and self.draft_model is None:
            raise ValueError("proposer 'draft_model' needs `draft_model:` (a model profile name)")
        if self.proposer == "ngram" and self.draft_model is not None:
            raise ValueError("`draft_model:` is only used with proposer: draft_model")
        if self.proposer == "draft_model" and self.ngram_cost_s != NGRAM_COST_S:
            raise ValueError("`ngram_cost_s:` is only used with proposer: ngram (the draft "
                             "model's steps are priced by its cost model)")
        return self


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Mean tokens a decoding sequence gains per step with k full drafts:
    Σ_{i=0..k} α^i = (1 − α^(k+1)) / (1 − α)."""
    a, k = acceptance_rate, num_speculative_tokens
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def build_draft_cost(spec: "ResolvedPool", cfg: SpeculativeConfig,
                     models: dict[str, ModelSpec] | None = None, base_dir=None
                     ) -> CostModel | None:
    """The draft model's cost model for a pool, or None for the n-gram proposer.

    The draft model runs on the pool's GPUs with the pool's tp, weight and KV
    dtypes and cost model settings. ``models`` are the scenario's inline model
    profiles (``scenario.models``), searched before the shipped ones. Raises
    ValueError naming the known models if the draft model is unknown.
    """
    if cfg.proposer != "draft_model":
        return None
    from sim.cost import build_cost_model
    name = cfg.draft_model
    model = profiles.find_model(name, models)
    if model is None:
        known = sorted(set(profiles.model_names()) | set(models or {}), key=str.lower)
        raise ValueError(f"unknown draft model '{name}'; known models: {', '.join(known)}")
    return build_cost_model(dataclasses.replace(spec, model=model), base_dir)


class _Item:
    """One scheduled sequence: ``num_new`` tokens, of which ``drafts`` are draft
    tokens (``drafts`` is -1 for a prefill chunk)."""

    __slots__ = ("req", "num_new", "drafts")

    def __init__(self, req: Request, num_new: int, drafts: int) -> None:
        self.req = req
        self.num_new = num_new
        self.drafts = drafts

    @property
    def decoding(self) -> bool:
        return self.drafts >= 0


class SpeculativeScheduler(Scheduler):
    @classmethod
    def pool_parts(cls, pool, cfg, rng, models=None, base_dir=None) -> dict:
        return {"rng": rng, "draft_cost": build_draft_cost(pool, cfg, models, base_dir)}

    def __init__(self, cfg: SpeculativeConfig, *, rng: np.random.Generator | None = None,
                 draft_cost: CostModel | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if cfg.proposer == "draft_model" and draft_cost is None:
            raise ValueError(f"proposer 'draft_model' needs the draft model's cost model "
                             f"(draft_cost=build_draft_cost(pool, cfg)) for "
                             f"'{cfg.draft_model}'")
        self.cfg = cfg
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.draft_cost = draft_cost if cfg.proposer == "draft_model" else None
        self._k = cfg.num_speculative_tokens
        self._alpha = cfg.acceptance_rate
        self.num_steps = 0
        self.num_decode_seq_steps = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    # -- planning -------------------------------------------------------------------
    def _wanted(self, req: Request, budget: int) -> tuple[int, int]:
        """(tokens, drafts) a running request asks for within ``budget``."""
        if req.is_decoding:
            drafts = min(self._k, req.max_output_tokens - req.num_output_tokens - 1, budget - 1)
            return 1 + drafts, drafts
        return min(req.num_tokens - req.num_computed_tokens, budget), -1

    def _schedule(self, now_s: float) -> list[_Item]:
        budget = self.cfg.max_num_batched_tokens
        scheduled: list[_Item] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new, drafts = self._wanted(req, budget)
            while not self.kv.allocate(req, num_new):
                victim = self.running.pop()
                self.requeue(victim)
                preempted = True
                if victim is req:
                    break
            else:
                scheduled.append(_Item(req, num_new, drafts))
                budget -= num_new
                i += 1
                continue
            break  # the request itself was preempted: it was the last running one
        if preempted:
            return scheduled
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            head = self.admit_head(budget, self.cfg.chunked_prefill,
                                   self.cfg.max_num_batched_tokens, now_s)
            if head is None:
                break
            req, num_new = head
            self.running.append(req)
            scheduled.append(_Item(req, num_new, -1))
            budget -= num_new
        return scheduled

    def next_segment(self, now_s: float) -> Segment | None:
        if not self.running and not self.waiting:
            return None
        scheduled = self._schedule(now_s)
        if not scheduled:
            return None
        num_tokens = prefill_tokens = prefill_work = decode_kv = 0.0
        num_prefill = num_drafts = max_drafts = 0
        drafting: list[tuple[int, int]] = []          # (context, drafts) of drafting sequences
        for item in scheduled:
            req, n = item.req, item.num_new
            num_tokens += n
            if item.decoding:
                context = req.num_computed_tokens
                decode_kv += context + 1.0
                if n > 1:
                    prefill_work += BatchShape.prefill_work(n - 1, context + 1.0)
                if item.drafts > 0:
                    drafting.append((context, item.drafts))
                    num_drafts += item.drafts
                    max_drafts = max(max_drafts, item.drafts)
            else:
                prefill_tokens += n
                prefill_work += BatchShape.prefill_work(n, req.num_computed_tokens)
                num_prefill += 1
        num_seqs = len(scheduled)
        time_s, flops, moved = self.cost.step_scalar(
            num_tokens, float(num_seqs + num_drafts), prefill_work, decode_kv)
        draft = self.draft_cost
        if draft is not None:
            if num_prefill:
                t, f, b = draft.step_scalar(prefill_tokens, float(num_prefill), prefill_work, 0.0)
                time_s, flops, moved = time_s + t, flops + f, moved + b
            for i in range(max_drafts):
                n_i = kv_i = 0.0
                for context, drafts in drafting:
                    if drafts > i:
                        n_i += 1.0
                        kv_i += context + 1.0 + i
                t, f, b = draft.step_scalar(n_i, n_i, 0.0, kv_i)
                time_s, flops, moved = time_s + t, flops + f, moved + b
        elif num_drafts:
            time_s += self.cfg.ngram_cost_s
        return Segment.single_step(time_s, num_seqs, num_tokens, flops, moved, scheduled)

    # -- applying a finished segment ---------------------------------------------------
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        assert num_steps == 1
        scheduled: list[_Item] = seg.payload
        self.num_steps += 1
        decoding = [item for item in scheduled if item.decoding]
        if decoding:
            # leading accepted drafts before the first rejection, one draw per
            # decoding sequence in running order
            accepted = self.rng.geometric(1.0 - self._alpha, size=len(decoding)) - 1
        kv = self.kv
        block_size = kv.block_size_tokens
        finished: list[Request] = []
        d = 0
        for item in scheduled:
            req = item.req
            if item.decoding:
                j = min(int(accepted[d]), item.drafts)
                d += 1
                gain = min(1 + j, req.max_output_tokens - req.num_output_tokens)
                req.num_computed_tokens += gain
                req.num_output_tokens += gain
                own = blocks_for(req.num_computed_tokens, block_size) - req.prefix_blocks
                surplus = req.num_blocks - max(own, 0)
                if surplus > 0:                   # release the rejected drafts' slots
                    req.num_blocks -= surplus
                    kv.give(surplus)
                self.num_decode_seq_steps += 1
                self.num_draft_tokens += item.drafts
                self.num_accepted_tokens += gain
            else:
                req.num_computed_tokens += item.num_new
                if req.prefix_group is not None:
                    kv.register_prefix(req)   # shared blocks are cached as computed
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
