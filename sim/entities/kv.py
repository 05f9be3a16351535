"""Paged KV cache accounting for one replica, with prefix caching.

Blocks are allocated as tokens are computed and freed when a sequence
finishes or is preempted. "Doesn't fit" is a ``False`` (or ``None``) return,
not an exception, so the scheduler can preempt and retry. The manager keeps a
request's block counts (``num_blocks``, ``prefix_blocks``); its token counts
are the scheduler's, which admission tells what it found cached (``Admitted``),
as vLLM's KV cache manager returns the computed blocks and the scheduler
updates the request.

Prefix caching (vLLM's automatic prefix caching, for shared system prompts):
a request's full blocks that lie inside its prefix group's shared prefix are
kept per group as a chain of blocks 0, 1, 2, ... with reference counts. A
later request of the group takes the cached chain (only full blocks, and
never its last prompt token, which must be computed to sample) and skips
their prefill. A block whose count falls to 0 stays cached but can be
evicted; eviction takes the tail block of the least recently used group
(a chain is only usable from its start, so tails go first). Blocks of
different groups are never shared.

A preempted request keeps its work the same way: vLLM (V1, prefix caching on by
default) caches every full block, not only shared prefixes, so the blocks a preempted
request gives back stay cached until evicted, and when it is admitted again it starts
from those still there instead of recomputing prompt and output. Its full computed
blocks past its group's prefix become an evictable chain of its own (``preempt``),
which only it can hit, and only while the blocks before them are cached; on
re-admission they are its own blocks again. Without prefix caching a preempted
request recomputes everything.

Prefix identity by block (multi-turn sessions, traces that name their prompt's blocks): a
request may carry ``block_keys``, which name runs of its full blocks so that equal names
mean equal tokens up to the end of that run (the chained block hashes of vLLM's prefix
cache; a session's runs are single blocks, a trace's the pool blocks of one named trace
block, since the trace says nothing finer). Runs are cached in one table shared by every
request on the replica, a tree in effect: a request hits the longest sequence of its runs,
from its first block, still cached, so conversations share a system prompt and then go
their own ways, and a turn starts from its conversation's earlier turns. Runs are cached
as they are computed (the prompt's) and when the request ends (every full run, its
answer's too, so that the next turn finds them). A run whose name another request cached
meanwhile stays the request's own, as vLLM keeps one block per hash, and its later runs
are cached still. Cached runs no request holds are evicted whole, least recently freed
first, a request's tail before its head.

Eviction order is an approximation of vLLM's single free-block queue (least recently
freed first): never-used blocks and blocks of finished requests (which no later
request shares) go first, then cached chains, least recently used first.

``num_free_blocks`` counts every block an allocation can have: never-used
ones plus evictable cached ones. ``num_cached_blocks`` counts the latter.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from sim.entities.request import Request


class Admitted(NamedTuple):
    """What the cache gave a waiting request it admitted."""

    cached_tokens: int          # tokens it starts from, computed already (whole blocks)
    shared_prefix_tokens: int   # of those, the ones from its group's shared prefix


NO_HIT = Admitted(0, 0)


def blocks_for(num_tokens: int, block_size_tokens: int) -> int:
    return -(-num_tokens // block_size_tokens)


class KvCacheManager:
    __slots__ = ("num_blocks", "block_size_tokens", "num_free_blocks", "prefix_caching",
                 "num_cached_blocks", "_chains", "_resume_from", "_keyed", "_evictable",
                 "_held", "_next_key")

    def __init__(self, num_blocks: int, block_size_tokens: int,
                 prefix_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size_tokens = block_size_tokens
        self.num_free_blocks = num_blocks
        self.prefix_caching = prefix_caching
        self.num_cached_blocks = 0                       # evictable, refcount 0
        # a prefix group's name -> refcounts of its chain's blocks; a preempted Request ->
        # its own cached blocks (all 0), in least recently used order
        self._chains: OrderedDict[str | Request, list[int]] = OrderedDict()
        self._resume_from: dict[Request, int] = {}       # block index its own chain starts at
        self._keyed: dict = {}                           # block key -> requests holding it
        self._evictable: OrderedDict = OrderedDict()     # keys held by none, oldest first
        self._held: dict[Request, list] = {}             # the keys a request holds
        self._next_key: dict[Request, int] = {}          # its next block to cache

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    # -- plain blocks -------------------------------------------------------------
    def take(self, count: int) -> None:
        """Hand out ``count`` blocks (the caller checked ``num_free_blocks``),
        evicting cached ones when the never-used ones run out."""
        short = count - (self.num_free_blocks - self.num_cached_blocks)
        if short > 0:
            self._evict(short)
        self.num_free_blocks -= count

    def give(self, count: int) -> None:
        self.num_free_blocks += count

    def blocks_needed(self, req: Request, num_new_tokens: int,
                      computed_tokens: int | None = None) -> int:
        """Extra blocks ``req`` needs to hold ``num_new_tokens`` more tokens past its
        computed ones (``computed_tokens``, default the request's own count)."""
        if computed_tokens is None:
            computed_tokens = req.num_computed_tokens
        total = blocks_for(computed_tokens + num_new_tokens, self.block_size_tokens)
        return max(total - req.prefix_blocks - req.num_blocks, 0)

    def allocate(self, req: Request, num_new_tokens: int,
                 computed_tokens: int | None = None) -> bool:
        need = self.blocks_needed(req, num_new_tokens, computed_tokens)
        if need > self.num_free_blocks:
            return False
        self.take(need)
        req.num_blocks += need
        return True

    def free(self, req: Request) -> None:
        if req.block_keys is not None and self.prefix_caching:
            # every full block computed stays cached (its answer's too: the next turn's)
            self._register_keyed(req, min(req.num_computed_tokens, req.num_tokens - 1))
        self.num_free_blocks += req.num_blocks
        req.num_blocks = 0
        if req.prefix_blocks:
            self.release_prefix(req)

    def preempt(self, req: Request) -> None:
        """Free a preempted request's blocks; with prefix caching its full computed ones
        stay cached for it (evictable) until it is admitted again."""
        if req.block_keys is not None and self.prefix_caching:
            self._register_keyed(req, req.num_computed_tokens)   # under their keys
            start = self._next_key.get(req, 0)
        else:
            start = req.prefix_blocks
        keep = 0
        if self.prefix_caching:
            keep = min(req.num_computed_tokens // self.block_size_tokens - start,
                       req.num_blocks)
        self.free(req)
        self._forget(req)                       # an older chain of its own is stale
        if keep > 0:
            self._chains[req] = [0] * keep
            self._resume_from[req] = start
            self.num_cached_blocks += keep

    def clear(self) -> None:
        """Empty the cache (the replica was lost)."""
        self.num_free_blocks = self.num_blocks
        self.num_cached_blocks = 0
        self._chains.clear()
        self._resume_from.clear()
        self._keyed.clear()
        self._evictable.clear()
        self._held.clear()
        self._next_key.clear()

    def _forget(self, req: Request) -> None:
        chain = self._chains.pop(req, None)
        if chain is not None:
            del self._resume_from[req]
            self.num_cached_blocks -= len(chain)

    @property
    def capacity_tokens(self) -> int:
        """The longest sequence an empty cache holds."""
        return self.num_blocks * self.block_size_tokens

    def fits_ever(self, num_tokens: int) -> bool:
        """Whether a sequence of ``num_tokens`` could fit in an empty cache."""
        return num_tokens <= self.capacity_tokens

    # -- prefix cache ---------------------------------------------------------------
    def hit_blocks(self, req: Request) -> int:
        """Cached blocks ``req`` could start from: its group's shared prefix, then (after
        a preemption) its own blocks still cached, never its last token."""
        if not self.prefix_caching:
            return 0
        shared = self._shared_hit(req)
        own = self._chains.get(req)
        if own and self._resume_from[req] == shared:
            usable = (req.num_tokens - 1) // self.block_size_tokens
            return max(min(shared + len(own), usable), shared)
        return shared

    def _shared_hit(self, req: Request) -> int:
        if req.block_keys is not None:
            return self._keyed_hit(req)
        if req.prefix_group is None:
            return 0
        chain = self._chains.get(req.prefix_group)
        if not chain:
            return 0
        usable = min(req.prefix_tokens, req.prompt_tokens - 1) // self.block_size_tokens
        return min(len(chain), usable)

    def _keyed_hit(self, req: Request) -> int:
        """Leading blocks of ``req``'s named runs still cached, whole runs (never its last
        token's block)."""
        keys, bs, cache = req.block_keys, self.block_size_tokens, self._keyed
        usable = min(keys.limit_tokens, req.num_tokens - 1) // bs
        n = 0
        while n < usable:
            key, end = keys.run(n, bs)
            if end > usable or key not in cache:
                break
            n = end
        return n

    def _split(self, req: Request, hit: int) -> tuple[int, int]:
        """(shared prefix blocks, own cached blocks) of ``hit`` blocks from hit_blocks."""
        shared = min(hit, self._shared_hit(req))
        return shared, hit - shared

    def pinned_by(self, req: Request, hit: int) -> int:
        """How many of the first ``hit`` cached blocks are evictable (and would
        stop being free if ``req`` took them)."""
        shared, own = self._split(req, hit)
        pinned = own                            # a request's own cached blocks are all evictable
        if shared and req.block_keys is not None:
            keys, bs, cache = req.block_keys, self.block_size_tokens, self._keyed
            i = 0
            while i < shared:
                key, end = keys.run(i, bs)
                if cache[key] == 0:
                    pinned += end - i
                i = end
        elif shared:
            chain = self._chains[req.prefix_group]
            pinned += sum(1 for i in range(shared) if chain[i] == 0)
        return pinned

    def acquire_prefix(self, req: Request, hit: int) -> None:
        shared, own = self._split(req, hit)
        if own:                                 # its own cached blocks are its own again
            self._forget(req)
            self.num_free_blocks -= own
            req.num_blocks += own
        if not shared:
            return
        if req.block_keys is not None:
            keys, bs, cache = req.block_keys, self.block_size_tokens, self._keyed
            i = 0
            taken = []
            while i < shared:
                key, end = keys.run(i, bs)
                held = cache[key]
                if held == 0:
                    del self._evictable[key]
                    self.num_cached_blocks -= end - i
                    self.num_free_blocks -= end - i
                cache[key] = held + 1
                taken.append(key)
                i = end
            self._held[req] = taken
            self._next_key[req] = shared
            req.prefix_blocks = shared
            return
        chain = self._chains[req.prefix_group]
        for i in range(shared):
            if chain[i] == 0:
                self.num_cached_blocks -= 1
                self.num_free_blocks -= 1
            chain[i] += 1
        req.prefix_blocks = shared
        self._chains.move_to_end(req.prefix_group)

    def release_prefix(self, req: Request) -> None:
        if req.block_keys is not None:
            cache = self._keyed
            self._next_key.pop(req, None)
            for key in reversed(self._held.pop(req, ())):     # the tail goes first
                held = cache[key] - 1
                cache[key] = held
                if held == 0:
                    self._evictable[key] = None
                    size = key[-1]                              # blocks in the run
                    self.num_cached_blocks += size
                    self.num_free_blocks += size
            req.prefix_blocks = 0
            return
        chain = self._chains[req.prefix_group]
        for i in range(req.prefix_blocks):
            chain[i] -= 1
            if chain[i] == 0:
                self.num_cached_blocks += 1
                self.num_free_blocks += 1
        req.prefix_blocks = 0
        self._chains.move_to_end(req.prefix_group)

    def admit(self, req: Request, hit: int, num_new_tokens: int) -> Admitted | None:
        """Blocks for a waiting request's first chunk of ``num_new_tokens``,
        starting from ``hit`` cached blocks (:meth:`hit_blocks`: its group's shared
        prefix, then its own blocks kept since a preemption; their tokens skip
        prefill). None, with nothing taken, when they do not fit. The request's token
        counts are the scheduler's to update from the result."""
        if not hit:
            return NO_HIT if self.allocate(req, num_new_tokens) else None
        cached = hit * self.block_size_tokens
        own = blocks_for(cached + num_new_tokens, self.block_size_tokens) - hit
        if own + self.pinned_by(req, hit) > self.num_free_blocks:
            return None
        self.acquire_prefix(req, hit)
        ok = self.allocate(req, num_new_tokens, computed_tokens=cached)
        assert ok, "prefix hit admitted without room for its own blocks"
        return Admitted(cached, req.prefix_blocks * self.block_size_tokens)

    def register_prefix(self, req: Request, num_tokens: int | None = None) -> None:
        """Full blocks inside the shared prefix that the group's chain lacks move from
        ``req``'s own blocks into the chain, up to ``num_tokens`` (default: its computed
        tokens). The scheduler registers a chunk's blocks when it schedules the chunk, as
        vLLM caches a block's hash when it allocates it: a request admitted later in the
        same step may start from blocks this step computes (their KV is written before
        attention reads it)."""
        if not self.prefix_caching or req.prefix_group is None:
            return
        if num_tokens is None:
            num_tokens = req.num_computed_tokens
        if req.block_keys is not None:
            self._register_keyed(req, num_tokens)
            return
        full = min(num_tokens, req.prefix_tokens) // self.block_size_tokens
        chain = self._chains.setdefault(req.prefix_group, [])
        if req.prefix_blocks != len(chain) or full <= len(chain):
            return                  # the chain grew meanwhile, or nothing new to add
        new = full - len(chain)
        chain.extend([1] * new)
        req.num_blocks -= new
        req.prefix_blocks = full
        self._chains.move_to_end(req.prefix_group)

    def _register_keyed(self, req: Request, num_tokens: int) -> None:
        """``req``'s own full runs of blocks past those cached already, up to
        ``num_tokens``, cached under their names; a run whose name another request cached
        meanwhile stays its own (vLLM keeps one block per hash), and the later ones are
        cached still."""
        keys, bs, cache = req.block_keys, self.block_size_tokens, self._keyed
        full = min(num_tokens, keys.limit_tokens) // bs
        i = self._next_key.get(req, 0)
        if i >= full:
            return
        held = self._held.setdefault(req, [])
        while i < full:
            key, end = keys.run(i, bs)
            size = end - i
            if end > full or req.num_blocks < size:
                break
            if key not in cache:
                cache[key] = 1
                req.num_blocks -= size
                req.prefix_blocks += size
                held.append(key)
            i = end
        self._next_key[req] = i

    def _evict(self, count: int) -> None:
        for group in list(self._chains):
            chain = self._chains[group]
            while count and chain and chain[-1] == 0:
                chain.pop()
                self.num_cached_blocks -= 1
                count -= 1
            if not chain:
                del self._chains[group]
                self._resume_from.pop(group, None)
            if not count:
                return
        # a named run goes whole: past ``count``, its blocks become never-used free ones
        evictable, cache = self._evictable, self._keyed
        while count > 0 and evictable:
            key, _ = evictable.popitem(last=False)
            del cache[key]
            self.num_cached_blocks -= key[-1]
            count -= key[-1]
        assert count <= 0, "evicted fewer cached blocks than the free count promised"
