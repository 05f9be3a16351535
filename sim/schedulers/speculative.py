"""Continuous batching with speculative decoding, vLLM V1 style.

Built on the continuous scheduler's step (``continuous.py``): admission,
prefill chunks, prefix-cache hits, the KV admission gates and the FCFS or
priority policy (waiting order and preemption victims) are that step's, and
so are the config's limits (``BatchLimits``). What differs is the decoders.

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

Decoders take their KV and budget one by one in admission order, as vLLM's
running loop does: when a block cannot be had the policy's victim is
preempted (a decoder that preempts itself ends the step's scheduling), and
a decoder that finds the budget spent waits for the next step. Each keeps
its own counters and blocks (``Decoders``), since their gains differ.

Draws come from a numpy Generator (``rng``), one per scheduled decoding
sequence per step, in admission order, so a run is reproducible for a
fixed seed. Because every decode step's outcome is random, there is no
fast-forward: steps are planned and simulated one by one.

Step time = draft cost + target cost.

- Target: ``cost.step_scalar(tokens, rows, prefill_work, decode_kv)`` with
  ``tokens`` the scheduled tokens (drafts included); ``rows`` the logit rows
  (one per sequence plus one per draft: the verify pass samples every
  position, so the LM head and per-sequence sampling work scale with it);
  and, for each decoding sequence of context ``c`` (computed tokens),
  ``decode_kv += c + 1``: the verify pass reads the sequence's KV once for all
  its 1 + k' query tokens (attention kernels share one load between a
  sequence's queries), and the k' draft positions add attention arithmetic
  like a prefill chunk of k' tokens over that context. The call also passes
  ``sequences`` (the sequences the rows belong to): under pipeline parallelism
  the micro-batches are counted in sequences, never splitting one verify pass.
- Draft, ``proposer: draft_model``: ``max k'`` sequential decode steps of the
  draft model (its own roofline cost model on the same GPUs, tp and dtypes,
  built by the composition root, ``sim.core.fleet.draft_cost_model``); draft step i runs the sequences still drafting
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

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from sim.config.common import Name, PositiveInt, Seconds
from sim.cost.base import CostModel
from sim.cost.shape import BatchShape
from sim.entities.kv import blocks_for
from sim.entities.request import Request
from sim.schedulers.base import Scheduler, Segment
from sim.schedulers.continuous import ContinuousScheduler
from sim.schedulers.continuous_config import BatchLimits

NGRAM_COST_S = 0.0002         # the n-gram proposer's CPU time per step, by default


class SpeculativeConfig(BatchLimits):
    type: Literal["speculative"] = "speculative"
    engine_terms_apply: ClassVar[bool] = False
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


class Decoders:
    """The decoding sequences, one by one (each gains its own number of tokens per step),
    with what the continuous step and its policies ask of its decode cohort: membership
    by admission number, the last admitted, and removal."""

    __slots__ = ("members", "_in_order")

    def __init__(self) -> None:
        self.members: dict[int, Request] = {}      # seq -> request, in admission order
        self._in_order = True

    def __len__(self) -> int:
        return len(self.members)

    def add(self, req: Request) -> None:
        members = self.members
        if members and req.seq < next(reversed(members)):
            self._in_order = False            # joined before one admitted earlier
        members[req.seq] = req

    def remove(self, req: Request, step: int = 0, alloc_step: int | None = None) -> None:
        """``req`` leaves; it holds its own blocks (``req.num_blocks``) throughout."""
        del self.members[req.seq]

    def in_order(self) -> list[Request]:
        """The members in admission order (``members`` is rebuilt in that order when a
        member joined out of it)."""
        if not self.members:
            return []
        if not self._in_order:
            self.members = dict(sorted(self.members.items()))
            self._in_order = True
        return list(self.members.values())

    def output_tokens_at(self, step: int) -> int:
        """The output tokens the members have generated (each keeps its own count)."""
        return sum(r.num_output_tokens for r in self.members.values())

    def last(self) -> Request:
        """The member admitted last."""
        return self.members[max(self.members)]

    def materialise(self, step: int) -> list[Request]:
        return list(self.members.values())


class _Verify:
    """One decoder's verify pass this step: ``num_new`` = 1 + ``drafts`` tokens."""

    __slots__ = ("req", "num_new", "drafts")

    def __init__(self, req: Request, num_new: int, drafts: int) -> None:
        self.req = req
        self.num_new = num_new
        self.drafts = drafts


class SpeculativeScheduler(ContinuousScheduler):
    __slots__ = ("rng", "draft_cost", "_k", "_alpha", "_verify", "num_decode_seq_steps", "num_draft_tokens", "num_accepted_tokens")
    # a finished request's extra step (finished_extra_step) is not simulated here: its
    # decoders leave at their last accepted token
    keeps_finished_extra_step = False

    @classmethod
    def pool_parts(cls, rng: np.random.Generator, draft_cost: CostModel | None) -> dict:
        return {"rng": rng, "draft_cost": draft_cost}

    def __init__(self, cfg: SpeculativeConfig, *, rng: np.random.Generator | None = None,
                 draft_cost: CostModel | None = None, **kwargs) -> None:
        if cfg.proposer == "draft_model" and draft_cost is None:
            raise ValueError(f"proposer 'draft_model' needs the draft model's cost model "
                             f"(draft_cost=sim.core.fleet.draft_cost_model(pool)) for "
                             f"'{cfg.draft_model}'")
        super().__init__(cfg, **kwargs)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.draft_cost = draft_cost if cfg.proposer == "draft_model" else None
        self._k = cfg.num_speculative_tokens
        self._alpha = cfg.acceptance_rate
        self._verify: list[_Verify] = []           # this step's verify passes
        self.num_decode_seq_steps = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    @property
    def num_steps(self) -> int:
        return self.step

    # -- the decoders' part of the continuous step ---------------------------------------
    @staticmethod
    def steps_one_by_one(cfg) -> bool:
        return True

    def _new_decoders(self) -> Decoders:
        return Decoders()

    def _allocate_decode_step(self) -> tuple[bool, bool]:
        """Each decoder in admission order takes KV for its verify pass within the
        remaining budget; returns (preempted, stopped) as the continuous step does."""
        verify: list[_Verify] = []
        self._verify = verify
        budget = self.cfg.max_num_batched_tokens
        preempted = stopped = False
        order = self.cohort.in_order()          # (may rebuild ``members`` sorted)
        members = self.cohort.members
        kv, k = self.kv, self._k
        for req in order:
            if budget <= 0:
                break
            if req.seq not in members:
                continue                        # preempted for a decoder before it
            drafts = min(k, req.max_output_tokens - req.num_output_tokens - 1, budget - 1)
            num_new = 1 + drafts
            while not kv.allocate(req, num_new):
                victim = self.order.victim()
                preempted = True
                if victim is not req and victim.seq in members:
                    budget += self._unschedule_decoder(victim)
                    continue
                self._preempt(victim)
                if victim is req:
                    stopped = True
                    break
            else:
                verify.append(_Verify(req, num_new, drafts))
                budget -= num_new
                continue
            break
        return preempted, stopped

    def _decode_tokens(self, num_decode: int) -> int:
        return sum(item.num_new for item in self._verify)

    def _plan_step(self, now_s: float, decoders: bool):
        if not decoders:
            # a prefill-only step (prefill_only_steps): no verify pass; the last step's
            # would otherwise be run again, for decoders that may have finished
            self._verify = []
        return super()._plan_step(now_s, decoders)

    def _unschedule_decoder(self, victim: Request) -> int:
        """Preempt decoder ``victim``; the tokens of its verify pass, if it had one this
        step, go back to the budget."""
        given = 0
        for i, item in enumerate(self._verify):
            if item.req is victim:
                given = item.num_new
                del self._verify[i]
                break
        self._preempt(victim)
        return given

    def _stop_decoding(self, req: Request, now_s: float) -> None:
        """Nothing to do: a decoder's last token time and longest gap are kept step by
        step (``finish_segment``)."""

    def _join(self, req: Request, end_s: float) -> None:
        req.last_token_s = end_s
        self.cohort.add(req)

    def kv_used_blocks_during(self, seg: Segment, steps_done: int) -> int:
        return Scheduler.kv_used_blocks_during(self, seg, steps_done)

    # -- one step -------------------------------------------------------------------
    def next_segment(self, now_s: float) -> Segment | None:
        if not self.cohort.members and not self.prefilling and not self.waiting:
            return None
        while True:
            plan, preempted = self._schedule(now_s)
            verify = self._verify
            if plan.prefill or verify:
                break
            if not preempted:
                return None
            # a decoder that preempted itself before any other was scheduled (the
            # priority policy's victim can come first): vLLM's step is empty, and it
            # schedules again at once with that decoder's blocks free
        num_tokens = prefill_tokens = prefill_work = chunk_work = decode_kv = 0.0
        num_drafts = max_drafts = 0
        drafting: list[tuple[int, int]] = []          # (context, drafts) of drafting sequences
        for item in verify:
            n = item.num_new
            num_tokens += n
            context = item.req.num_computed_tokens
            decode_kv += context + 1.0
            if n > 1:
                prefill_work += BatchShape.prefill_work(n - 1, context + 1.0)
                drafting.append((context, item.drafts))
                num_drafts += item.drafts
                max_drafts = max(max_drafts, item.drafts)
        for req, n in plan.prefill:
            num_tokens += n
            prefill_tokens += n
            chunk_work += BatchShape.prefill_work(n, req.num_computed_tokens)
        prefill_work += chunk_work
        num_prefill = len(plan.prefill)
        num_seqs = len(verify) + num_prefill
        # rows are the logits computed (one a draft besides each sequence's own); a
        # pipeline fills its micro-batches with sequences, never splitting one's verify pass
        time_s, flops, moved = self.cost.step_scalar(
            num_tokens, float(num_seqs + num_drafts), prefill_work, decode_kv,
            sequences=float(num_seqs))
        draft = self.draft_cost
        if draft is not None:
            if num_prefill:
                # the draft model reads the prompt chunks (not the verify passes)
                t, f, b = draft.step_scalar(prefill_tokens, float(num_prefill), chunk_work, 0.0)
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
        return Segment.single_step(time_s, num_seqs, num_tokens, flops, moved,
                                   (plan.prefill, verify))

    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        assert num_steps == 1
        prefill, verify = seg.payload
        self.step += 1
        self._segments_done += 1
        finished: list[Request] = []
        if verify:
            # leading accepted drafts before the first rejection, one draw per
            # decoding sequence in admission order
            accepted = self.rng.geometric(1.0 - self._alpha, size=len(verify)) - 1
            kv = self.kv
            block_size = kv.block_size_tokens
            gaps = self.gaps
            for item, took in zip(verify, accepted.tolist()):
                req = item.req
                gain = min(1 + min(took, item.drafts),
                           req.max_output_tokens - req.num_output_tokens)
                req.num_computed_tokens += gain
                req.num_output_tokens += gain
                gap = end_s - req.last_token_s          # since its tokens before these
                if not (req.max_itl_s >= gap):
                    req.max_itl_s = gap
                if gaps.measured(req.arrival_s):
                    gaps.add(gap)          # the step's 1 + j tokens stream as one chunk
                req.last_token_s = end_s
                own = blocks_for(req.num_computed_tokens, block_size) - req.prefix_blocks
                surplus = req.num_blocks - max(own, 0)
                if surplus > 0:                   # release the rejected drafts' slots
                    req.num_blocks -= surplus
                    kv.give(surplus)
                self.num_decode_seq_steps += 1
                self.num_draft_tokens += item.drafts
                self.num_accepted_tokens += gain
                if req.done:
                    self.cohort.remove(req)
                    finished.append(req)
        self._apply_prefill(prefill, end_s, finished)
        self._complete_all(finished, end_s)
