"""The turns of a stream's multi-turn sessions, drawn up front.

Each conversation's turns, their new messages, answers and pauses are drawn when the run
starts, so a conversation is the same whatever the fleet; only when each later turn is
sent depends on the run (its previous answer's end plus the pause), so those turns get
no time here (``arrival_s`` infinite), as a closed-loop stream's requests.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np

from sim.config.inputs import DataFiles
from sim.config.sessions import SessionConfig
from sim.workload.lengths import sample_lengths


@dataclass(frozen=True)
class Turns:
    """One row per turn, conversation by conversation, turns in order."""

    arrival_s: np.ndarray       # a conversation's start for its first turn, inf for others
    prompt_tokens: np.ndarray   # the conversation so far plus the new message
    output_tokens: np.ndarray
    session: np.ndarray         # int64 conversation number within the stream
    think_s: np.ndarray         # float64 pause before the turn (0 for a first turn)


def draw_turns(cfg: SessionConfig, starts_s: np.ndarray, prompt_cfg, output_cfg,
               prefix_tokens: int, seed_seq: np.random.SeedSequence,
               base_dir: DataFiles | pathlib.Path) -> Turns:
    """The turns of conversations starting at ``starts_s``; a shared prefix of
    ``prefix_tokens`` opens every conversation."""
    turn_seq, message_seq, answer_seq, think_seq, first_seq = seed_seq.spawn(5)
    m = len(starts_s)
    turns = sample_lengths(cfg.turns, m, np.random.default_rng(turn_seq), base_dir)
    total = int(turns.sum())
    session = np.repeat(np.arange(m, dtype=np.int64), turns)
    head = np.zeros(m, dtype=np.int64)                  # each conversation's first row
    np.cumsum(turns[:-1], out=head[1:])
    first = np.zeros(total, dtype=bool)
    first[head] = True
    message = sample_lengths(prompt_cfg, total, np.random.default_rng(message_seq), base_dir)
    if cfg.first_prompt_tokens is not None:
        message[head] = sample_lengths(cfg.first_prompt_tokens, m,
                                       np.random.default_rng(first_seq), base_dir)
    answer = sample_lengths(output_cfg, total, np.random.default_rng(answer_seq), base_dir)
    # the conversation before each turn: every earlier message and answer of its own
    said = np.cumsum(message + answer) - (message + answer)
    history = said - said[head][session]
    prompt = prefix_tokens + history + message
    if cfg.think_time_distribution == "exponential" and cfg.think_time > 0:
        think = np.random.default_rng(think_seq).exponential(cfg.think_time, total)
    else:
        think = np.full(total, float(cfg.think_time))
    think[first] = 0.0
    keep = np.ones(total, dtype=bool)
    if cfg.max_context_tokens is not None:
        # a conversation ends before its first turn past the context window
        over = (prompt + answer > cfg.max_context_tokens).astype(np.int64)
        seen = np.cumsum(over)
        keep = (seen - (seen[head] - over[head])[session]) == 0
    arrival = np.where(first, starts_s[session] if m else np.empty(0), np.inf)
    return Turns(arrival[keep], prompt[keep], answer[keep], session[keep], think[keep])
