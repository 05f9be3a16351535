"""What a real engine is asked and what it reports, as plain records (no torch).

``calibrate.engines.hf.engine`` produces them while it serves; ``calibrate.engines.hf.engine_log``
writes and reads them, so that the fit and the comparison with the simulator
can be redone on a recorded run without the engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass
class EngineRecord:
    arrival_s: float          # when the request was handed to the engine
    first_token_s: float      # when its first output token was produced
    finish_s: float           # when its last output token was produced
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class EngineStep:
    """One engine iteration: its scheduled (new tokens, cached context, is prefill) per
    sequence (a sequence is prefill while it computes its prompt, whatever its tokens)."""

    start_s: float
    end_s: float
    seqs: tuple[tuple[int, int, bool], ...]
    idle_before_s: float = math.inf     # time since the engine's previous step ended

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class ContinuousLimits:
    """A continuous-batching engine's limits, as fleetsim's ``continuous`` pool states
    them."""

    max_batch_tokens: int
    max_requests_per_batch: int
    page_size: int
    num_blocks: int
