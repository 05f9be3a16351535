"""Names of a request's KV blocks for the prefix cache: equal names mean equal tokens from
the start of the prompt to the end of that block (as vLLM chains each block's hash to its
parent's), so the cache (:mod:`sim.entities.kv`) can share exactly the blocks two prompts have
in common. A pool names blocks of its own size; the names do not depend on it beyond the
block's index.

Names are given to runs of consecutive blocks that are cached, shared and evicted together
(``run``), each name ending with its run's length in blocks: a session names every block
on its own; a traced prompt names the pool blocks of one trace block together (a trace
says nothing finer), so a 12,000-token prompt is 24 runs, not 750 blocks."""
from __future__ import annotations


class SessionKeys:
    """A conversation's turn: an optional shared prefix (a system prompt, shared by every
    conversation of its group), then the conversation's own tokens (earlier turns'
    prompts and answers, then this turn's), all of which a later turn repeats."""

    __slots__ = ("prefix_key", "prefix_tokens", "conversation", "limit_tokens")

    def __init__(self, prefix_key: str | None, prefix_tokens: int, conversation: str,
                 limit_tokens: int) -> None:
        self.prefix_key = prefix_key
        self.prefix_tokens = prefix_tokens if prefix_key is not None else 0
        self.conversation = conversation
        self.limit_tokens = limit_tokens        # tokens that may be shared: all of them

    def run(self, index: int, block_tokens: int) -> tuple[tuple, int]:
        """(name, end) of the run of blocks starting at block ``index``: one block each."""
        if (index + 1) * block_tokens <= self.prefix_tokens:
            return (self.prefix_key, index, 1), index + 1
        return (self.conversation, index, 1), index + 1


class HashKeys:
    """A traced prompt whose ``trace_block_tokens``-token blocks are named by ids (the
    Mooncake traces' ``hash_ids``: equal ids, equal prefix up to that block's end). A
    pool block is named by the id of the trace block its last token lies in."""

    __slots__ = ("scope", "ids", "trace_block_tokens", "limit_tokens")

    def __init__(self, scope: str, ids: tuple[int, ...], trace_block_tokens: int,
                 prompt_tokens: int) -> None:
        self.scope = scope                      # ids of different traces never match
        self.ids = ids
        self.trace_block_tokens = trace_block_tokens
        self.limit_tokens = min(prompt_tokens, len(ids) * trace_block_tokens)

    def run(self, index: int, block_tokens: int) -> tuple[tuple, int]:
        """(name, end) of the run starting at block ``index``: the pool blocks whose last
        token lies in one trace block (named by that block's id), up to the last full
        block of ``limit_tokens``."""
        j = ((index + 1) * block_tokens - 1) // self.trace_block_tokens
        end = min((j + 1) * self.trace_block_tokens // block_tokens,
                  self.limit_tokens // block_tokens)
        return (self.scope, self.ids[j], j, end - index), end
