"""Typed configuration of multi-turn sessions: a stream's arrivals start conversations,
and each conversation sends its turns one after another."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from sim.config.common import Seconds, StrictModel
from sim.config.lengths import MAX_TOKENS, LengthConfig, bounds

MAX_TURNS = 1_000


class SessionConfig(StrictModel):
    """Conversations (chat) or agent loops: the stream's arrival process starts them, and
    each sends ``turns`` requests in a row. A turn's prompt is the conversation so far
    (every earlier prompt and answer, which the prefix cache may still hold) plus a new
    message of ``prompt_tokens`` (the first turn's of ``first_prompt_tokens`` when given);
    its answer has ``output_tokens``. The next turn is sent ``think_time`` after the answer
    has streamed back (0 for an agent calling the model again with a tool's output). A
    conversation ends after its turns, when a turn is refused or cut off, when the next
    turn would pass ``max_context_tokens``, or at the end of the stream's window."""

    turns: LengthConfig = Field(
        description=f"Turns per conversation (a count distribution, at most {MAX_TURNS:,}).")
    think_time: Seconds = Field(
        default=0.0, description="Mean pause between an answer and the next turn.")
    think_time_distribution: Literal["exponential", "fixed"] = Field(
        "exponential", description="How the pauses vary around think_time.")
    first_prompt_tokens: Optional[LengthConfig] = Field(
        default=None, description="The first turn's message (a task, a document); "
                                  "default prompt_tokens.")
    max_context_tokens: Optional[int] = Field(
        default=None, ge=2, le=MAX_TOKENS,
        description="A conversation ends before a turn whose prompt and answer would pass "
                    "this (a model's context window); null for no limit.")

    @field_validator("turns")
    @classmethod
    def _bounded_turns(cls, turns):
        most = bounds(turns)[1]
        if most is None or most > MAX_TURNS:
            raise ValueError(f"a conversation has at most {MAX_TURNS:,} turns; give the "
                             f"distribution a max of at most {MAX_TURNS:,}"
                             + (f" (it may draw {most:,})" if most is not None else ""))
        return turns
