"""The end of a continuous step's prefill chunks: each advances its request, and a
request whose prompt (or recompute) is done samples a token and joins the decoders.

A part of ``ContinuousScheduler`` (``continuous.py``), mixed into it: its methods read and
change that scheduler's state.
"""
from __future__ import annotations

from sim.entities.request import Request


class PrefillChunks:
    __slots__ = ()

    def _apply_prefill(self, prefill: list[tuple[Request, int]], end_s: float,
                       finished: list[Request]) -> None:
        """Advance each prefill chunk of a finished step; a request whose prompt (or
        recompute) is done samples a token and joins the decoders, or is appended to
        ``finished`` when that was its last."""
        joined: list[Request] = []
        kv = self.kv
        for req, n in prefill:
            req.num_computed_tokens += n
            if req.prefix_group is not None:
                kv.register_prefix(req)
            if req.num_computed_tokens == req.prompt_tokens + req.num_output_tokens:  # num_tokens
                req.num_output_tokens += 1
                if req.num_output_tokens == 1:
                    req.first_token_s = end_s
                joined.append(req)
        if not joined:
            return
        if len(joined) == len(self.prefilling):
            self.prefilling = []           # usually every prefill finished
        else:
            keep = set(map(id, joined))
            self.prefilling = [r for r in self.prefilling if id(r) not in keep]
        for req in joined:
            if req.last_token_s == req.last_token_s:           # resumed after preemption
                gap = end_s - req.last_token_s
                if not (req.max_itl_s >= gap):
                    req.max_itl_s = gap
                if self.gaps.measured(req.arrival_s):
                    self.gaps.add(gap)
            if req.done:
                finished.append(req)
            else:
                self._join(req, end_s)
