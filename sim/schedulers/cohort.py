"""The decoding sequences of one replica, kept as aggregates.

Every decoding sequence advances by exactly one token per engine step, so
after ``step`` steps a member holds ``decode_base + step`` computed tokens
and ``output_base + step`` output tokens. The cohort stores only sums and
a histogram of ``decode_base mod block_size``, which gives in O(block size)
the KV tokens read by the next step and the blocks all members hold after
any number of steps. Members are kept in admission order (for choosing the
last one as a preemption victim) and in a heap by the step at which they
finish. Nothing here is per step or per member: the cost of a step does not
grow with the batch.

Both heaps drop the entries of members that left lazily. The finish heap
loses them as the step passes their finish step; the admission-order heap
only ever pops from its top (the latest admitted, usually still a member),
so it is rebuilt from the members once stale entries outnumber them, or it
would hold one entry per request the replica ever decoded.
"""
from __future__ import annotations

import heapq

from sim.entities.request import Request


def _admission_order(req: Request) -> int:
    return req.seq


# The finish heap holds plain ints, finish step · 2^SEQ_BITS + seq, which order as
# (finish step, seq) tuples would and compare faster.
SEQ_BITS = 32
_SEQ_MASK = (1 << SEQ_BITS) - 1


class DecodeCohort:
    __slots__ = ("bs", "members", "sum_base", "sum_quot", "residues", "sum_prefix_blocks",
                 "blocks_held", "sum_output_base", "_finish_heap", "_last_heap", "_last_heap_slack",
                 "measured_from_s", "num_measured", "extra_steps")

    def __init__(self, block_size_tokens: int, measured_from_s: float = 0.0,
                 extra_steps: int = 0) -> None:
        self.bs = block_size_tokens
        # steps a member decodes after its last output token (an engine that forms the
        # next step before reading this one's tokens keeps it one more): its finish step
        self.extra_steps = extra_steps
        # members that arrived at or after ``measured_from_s`` (the warm-up's end): each
        # step adds that many gaps between output tokens to the run's pooled ITL
        self.measured_from_s = measured_from_s
        self.num_measured = 0
        self.members: dict[int, Request] = {}      # seq -> request
        self.sum_base = 0                           # Σ decode_base
        self.sum_quot = 0                           # Σ decode_base // bs
        self.residues = [0] * block_size_tokens     # count of decode_base % bs
        self.sum_prefix_blocks = 0                  # blocks members hold via the prefix cache
        self.blocks_held = 0                        # KV blocks owned by the cohort (private)
        self.sum_output_base = 0                    # Σ output_base
        self._finish_heap: list[int] = []              # finish step << SEQ_BITS | seq
        self._last_heap: list[int] = []                # -seq, for the latest admitted
        self._last_heap_slack = 64                     # stale entries kept before a rebuild

    def __len__(self) -> int:
        return len(self.members)

    # -- aggregates ------------------------------------------------------------
    def blocks_at(self, step: int) -> int:
        """Σ ceil((decode_base + step) / bs) − Σ prefix blocks: the members' own
        blocks covering ``step``'s tokens (shared prefix blocks are not theirs).

        With decode_base = q·bs + r and step = k·bs + m (0 <= m < bs),
        ceil((r + m) / bs) is 0 when r + m = 0, 2 when r + m > bs, else 1.
        """
        n = len(self.members)
        if n == 0:
            return 0
        k, m = divmod(step, self.bs)
        total = self.sum_quot + n * (k + 1) - self.sum_prefix_blocks
        if m == 0:
            total -= self.residues[0]
        else:
            total += sum(self.residues[self.bs + 1 - m:])
        return total

    def blocks_entering(self, step: int) -> int:
        """``blocks_at(step) - blocks_at(step - 1)``: one block for each member whose
        context before ``step`` fills its last block (decode_base + step - 1 ≡ 0
        mod bs), counted from the histogram in O(1)."""
        return self.residues[(1 - step) % self.bs]

    def kv_tokens_at(self, step: int) -> int:
        """Σ (decode_base + step): the context every member attends over."""
        return self.sum_base + len(self.members) * step

    def output_tokens_at(self, step: int) -> int:
        """Σ (output_base + step): the output tokens the members have generated."""
        return self.sum_output_base + len(self.members) * step

    def next_finish_step(self) -> int | None:
        heap = self._finish_heap
        while heap and heap[0] & _SEQ_MASK not in self.members:
            heapq.heappop(heap)            # stale entry of a preempted member
        return heap[0] >> SEQ_BITS if heap else None

    # -- membership -------------------------------------------------------------
    def add(self, req: Request, step: int, blocks: int) -> None:
        """``req`` has just sampled a token after ``step`` steps and decodes next."""
        base = req.num_computed_tokens - step
        req.decode_base = base
        req.output_base = req.num_output_tokens - step
        self.members[req.seq] = req
        if req.arrival_s >= self.measured_from_s:
            self.num_measured += 1
        self.sum_output_base += req.output_base
        self.sum_base += base
        self.sum_quot += base // self.bs
        self.residues[base % self.bs] += 1
        self.sum_prefix_blocks += req.prefix_blocks
        self.blocks_held += blocks
        seq = req.seq
        assert 0 <= seq <= _SEQ_MASK, "admission number out of the finish heap's range"
        heapq.heappush(self._finish_heap,
                       (step + req.max_output_tokens - req.num_output_tokens + self.extra_steps)
                       << SEQ_BITS | seq)
        heapq.heappush(self._last_heap, -seq)

    def remove(self, req: Request, step: int, alloc_step: int | None = None) -> int:
        """Take ``req`` out with its counters brought up to ``step``; its own blocks
        move to ``req.num_blocks`` (to be freed by the caller) and are returned.
        ``alloc_step`` is the step its blocks were last allocated for (the
        coming one, when it is preempted after the cohort took this step's)."""
        del self.members[req.seq]
        if len(self._last_heap) > 2 * len(self.members) + self._last_heap_slack:
            self._last_heap = [-seq for seq in self.members]  # amortised O(1) per removal
            heapq.heapify(self._last_heap)
        if req.arrival_s >= self.measured_from_s:
            self.num_measured -= 1
        base = req.decode_base
        self.sum_output_base -= req.output_base
        self.sum_base -= base
        self.sum_quot -= base // self.bs
        self.residues[base % self.bs] -= 1
        self.sum_prefix_blocks -= req.prefix_blocks
        req.num_computed_tokens = base + step
        req.num_output_tokens = req.output_base + step
        held_step = step if alloc_step is None else alloc_step
        blocks = -(-(base + held_step) // self.bs) - req.prefix_blocks
        req.num_blocks = blocks
        self.blocks_held -= blocks
        return blocks

    def last(self) -> Request:
        """The member admitted last (members may start decoding out of order)."""
        heap = self._last_heap
        while -heap[0] not in self.members:
            heapq.heappop(heap)
        return self.members[-heap[0]]

    def pop_finished(self, step: int) -> list[Request]:
        """Members whose last output token came with ``step``, in admission order
        (a new list: the caller may add to it)."""
        heap = self._finish_heap
        bound = (step + 1) << SEQ_BITS      # every entry finishing at ``step`` or before
        if not heap or heap[0] >= bound:
            return []                      # most steps: nobody finishes
        done = []
        while heap and heap[0] < bound:
            req = self.members.get(heapq.heappop(heap) & _SEQ_MASK)
            if req is not None:
                done.append(req)
        if len(done) > 1:
            done.sort(key=_admission_order)
        return done

    def materialise(self, step: int) -> list[Request]:
        """Members with token counters brought up to ``step`` (for reporting)."""
        for req in self.members.values():
            req.num_computed_tokens = req.decode_base + step
            req.num_output_tokens = req.output_base + step
        return list(self.members.values())
