"""Paged KV cache accounting for one replica.

Blocks are allocated as tokens are computed and freed when a sequence
finishes or is preempted. Only counts are tracked here: a block's identity
matters once blocks are shared by prefix, which a prefix-aware manager adds
behind the same interface. "Doesn't fit" is a ``False`` return, not an
exception, so the scheduler can preempt and retry.
"""
from __future__ import annotations

from sim.request import Request


def blocks_for(num_tokens: int, block_size_tokens: int) -> int:
    return -(-num_tokens // block_size_tokens)


class KvCacheManager:
    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        self.num_blocks = num_blocks
        self.block_size_tokens = block_size_tokens
        self.num_free_blocks = num_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    def blocks_needed(self, req: Request, num_new_tokens: int) -> int:
        """Extra blocks ``req`` needs to hold ``num_new_tokens`` more computed tokens."""
        total = blocks_for(req.num_computed_tokens + num_new_tokens, self.block_size_tokens)
        return max(total - req.num_blocks, 0)

    def allocate(self, req: Request, num_new_tokens: int) -> bool:
        need = self.blocks_needed(req, num_new_tokens)
        if need > self.num_free_blocks:
            return False
        self.num_free_blocks -= need
        req.num_blocks += need
        return True

    def free(self, req: Request) -> None:
        self.num_free_blocks += req.num_blocks
        req.num_blocks = 0

    def fits_ever(self, num_tokens: int) -> bool:
        """Whether a sequence of ``num_tokens`` could fit in an empty cache."""
        return blocks_for(num_tokens, self.block_size_tokens) <= self.num_blocks
