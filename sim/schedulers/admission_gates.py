"""The KV admission gates of the continuous step (``kv_admission``): whether the waiting
head may be admitted beside what the running requests hold or were promised.

* ``guaranteed_no_evict``: its whole sequence beside every running request's promise;
* ``whole_prompt``: its whole prompt (less its prefix-cache hit) in the free blocks;
* ``estimated_output``: its prompt and estimated output beside every running request's
  reserve (``output_estimate.py``).

A part of ``ContinuousScheduler`` (``continuous.py``), mixed into it: its methods read and
change that scheduler's state (the admission loop in ``_plan_step`` asks these gates).
"""
from __future__ import annotations

from sim.entities.kv import blocks_for
from sim.entities.request import Request


class AdmissionGates:
    __slots__ = ()

    def _release(self, req: Request) -> None:
        """Give back what guaranteed_no_evict promised ``req`` (it finished or left)."""
        self._reserved_blocks -= self._reservations.pop(req.request_id, 0)

    def _whole_need(self) -> int | None:
        """guaranteed_no_evict: the blocks the head's whole sequence needs, or None when
        they do not fit beside every promise."""
        need = blocks_for(self.waiting[0].total_tokens + self._extra, self.kv.block_size_tokens)
        return need if self._reserved_blocks + need <= self.kv.num_blocks else None

    def _head_prompt_fits(self) -> bool:
        """whole_prompt: whether the free blocks hold the waiting head's whole known
        sequence (prompt, and output so far after a preemption) beyond its prefix-cache
        hit, counting the evictable hit blocks it would pin."""
        req, kv = self.waiting[0], self.kv
        hit = kv.hit_blocks(req) if req.num_computed_tokens == 0 else 0
        tokens = min(req.num_tokens, self.limits.max_model_len)
        need = blocks_for(tokens, kv.block_size_tokens) - hit + (
            kv.pinned_by(req, hit) if hit else 0)
        return need <= kv.num_free_blocks

    def _estimate_fits(self, pending_tokens: int, num_admitted: int) -> bool:
        """estimated_output: whether the waiting head's need, beside ``pending_tokens``
        (the needs of the ``num_admitted`` admitted this step, the tail of the prefilling
        ones), is below the free KV less every running request's reserve (a prefilling
        one's also holds its prompt still to compute)."""
        est, step, kv = self._estimate, self.step, self.kv
        prefilling = self.prefilling[:len(self.prefilling) - num_admitted]
        num_running = len(self.cohort) + len(prefilling)
        output = self.cohort.output_tokens_at(step) + sum(r.num_output_tokens
                                                          for r in prefilling)
        reserve = est.reserve_tokens(step, num_running, output) + sum(
            r.num_tokens - r.num_computed_tokens for r in prefilling)
        head = self.waiting[0]
        need = est.need_tokens(head.num_tokens - head.num_computed_tokens,
                               head.num_output_tokens)
        return need + pending_tokens < kv.num_free_blocks * kv.block_size_tokens - reserve
