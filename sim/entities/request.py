"""A request's mutable state while it is in the simulation.

Token accounting follows vLLM: ``num_tokens`` is prompt plus the output
generated so far; ``num_computed_tokens`` is how many of those have KV in
the cache. A step that brings computed up to known samples one new token.
Preemption by recompute resets ``num_computed_tokens`` to 0 (the generated
tokens are kept and recomputed as part of the prompt).
"""
from __future__ import annotations

import math

_NAN = math.nan


class Status:
    COMPLETED = "completed"
    REJECTED = "rejected"
    UNFINISHED = "unfinished"   # still queued or running when the run was cut off

    TERMINAL = (COMPLETED, REJECTED, UNFINISHED)


class Request:
    __slots__ = ("request_id", "stream_index", "team", "model", "pool", "priority",
                 "arrival_s", "prompt_tokens", "max_output_tokens", "replica",
                 "num_output_tokens", "num_computed_tokens", "num_blocks",
                 "admitted_s", "first_token_s", "finish_s", "preemptions",
                 "status", "reject_reason", "cached_prompt_tokens",
                 "seq", "decode_base", "output_base", "attempts", "holds_slot", "prefix_group",
                 "prefix_tokens", "prefix_blocks", "max_itl_s", "join_seg", "last_token_s",
                 "handoff", "kv_transfer_s", "api_key", "served_model", "earlier_pool",
                 "earlier_tokens", "carried_tokens", "block_keys", "session_next",
                 "session", "turn", "prompt_as_ids")

    def __init__(self, request_id: int, stream_index: int, team: str, model: str, pool: str,
                 priority: int, arrival_s: float, prompt_tokens: int, max_output_tokens: int) -> None:
        self.request_id = request_id
        self.stream_index = stream_index
        self.team = team
        self.model = model
        self.pool = pool
        self.priority = priority
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.max_output_tokens = max_output_tokens
        self.replica = -1
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.admitted_s = _NAN
        self.first_token_s = _NAN
        self.finish_s = _NAN
        self.preemptions = 0
        self.status: str | None = None
        self.reject_reason = ""
        self.cached_prompt_tokens = 0
        # Scheduler bookkeeping: admission order, and while decoding in a
        # cohort, computed = decode_base + step and output = output_base + step.
        self.seq = -1
        self.attempts = 1                  # tries by the client (retries after 429/503, losses)
        self.holds_slot = False            # counts against its team's concurrency limit
        self.decode_base = 0
        self.output_base = 0
        self.prefix_group: str | None = None   # shared-prefix key for prefix-affinity routing
        self.prefix_tokens = 0                 # length of that shared prefix
        self.prefix_blocks = 0                 # KV blocks held through the prefix cache
        self.block_keys = None                 # its blocks' identities (sim.entities.block_keys)
        self.session_next = -1                 # its conversation's next turn (arrival row)
        self.session = -1                      # its conversation, numbered in its stream
        self.turn = -1                         # its turn in that conversation, from 1
        self.prompt_as_ids = False             # the client sent token ids: nothing to tokenise
        self.max_itl_s = _NAN                  # longest gap between two output tokens
        self.join_seg = 0                      # segments done when it last began decoding
        self.last_token_s = _NAN               # when it last stopped decoding
        self.handoff = None                    # (decode pool, output tokens, link) when disaggregated
        self.kv_transfer_s = 0.0               # time its KV spent between pools
        self.api_key = ""                      # key id it came with
        self.served_model = ""                 # served name (model@version) it asked for
        # a pool that worked on it before its last (a disaggregated prefill, a cascade's
        # first attempt): the tokens computed there, and how many of them its own totals
        # (prompt less cache hits, plus output) still hold (the prefill's; a restarted
        # attempt's none); its cost is shared by that pool's work
        self.earlier_pool = ""
        self.earlier_tokens = 0
        self.carried_tokens = 0

    def restart(self) -> None:
        """Forget all progress: the request starts again (a retry elsewhere)."""
        self.max_itl_s = math.nan
        self.last_token_s = math.nan
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.prefix_blocks = 0                 # the cache it held is another replica's
        self.admitted_s = math.nan
        self.first_token_s = math.nan
        self.finish_s = math.nan               # an escalated attempt's end is not this one's
        self.replica = -1

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output_tokens

    @property
    def computed_tokens(self) -> int:
        """Tokens its current attempt had computed: prompt less cache hits, plus output
        (the work a pool's cost is shared by)."""
        return self.prompt_tokens - self.cached_prompt_tokens + self.num_output_tokens

    @property
    def total_tokens(self) -> int:
        """Tokens the sequence holds when it finishes."""
        return self.prompt_tokens + self.max_output_tokens

    @property
    def is_decoding(self) -> bool:
        """One known token left to compute after at least one sampled: a decode step."""
        return self.num_output_tokens > 0 and self.num_tokens - self.num_computed_tokens == 1

    @property
    def done(self) -> bool:
        return self.num_output_tokens >= self.max_output_tokens

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, prompt={self.prompt_tokens}, "
                f"out={self.num_output_tokens}/{self.max_output_tokens}, "
                f"computed={self.num_computed_tokens}, status={self.status})")
