"""``kv_admission: estimated_output``: SGLang's admission, which keeps KV room for the
output every running request has still to generate.

SGLang (0.4.x, ``PrefillAdder`` in python/sglang/srt/managers/schedule_policy.py, its
constants in python/sglang/srt/global_config.py) takes KV as tokens are computed and
retracts requests when a decode step finds none free, but it admits a waiting request
only while

    need(head) + Σ need(admitted this step) < free tokens − Σ_running reserve(r)

with need(r) = its tokens still to compute + min(max_new_tokens − output, 4096) and
reserve(r) = min(max_new_tokens − output, 4096) × new_token_ratio. The ratio starts at
0.7 (``default_init_new_token_ratio`` x ``schedule_conservativeness`` 1.0), falls by
(0.7 − 0.7 x 0.14) / 600 a step (``default_min_new_token_ratio_factor``,
``default_new_token_ratio_decay_steps``) to 0.098, goes back to 0.7 when nothing runs,
and after a retraction is set to (Σ output + 20 x n) / Σ max_new_tokens over the n
requests left running (``retract_decode_steps`` = 20; ``ScheduleBatch.retract_decode``).
Without it a prefill-first engine admits into the blocks its decodes need on the next
step and preempts a request for nearly every one it admits.

The ratio falls with every step that decodes (the scheduler's step count, which a
prefill-only step leaves alone, as SGLang's decode batches alone lower it). What is
approximated: fleetsim counts free tokens in whole blocks (free blocks x block size); a
retraction is fleetsim's preemption of one victim at a time (SGLang retracts until 20
steps' tokens are free); the reserve is summed from the running requests' total output,
exact while no output passes ``max_new_tokens`` (a client's cap). A request is admitted
whatever its need when nothing runs, so that one whose estimate exceeds the whole cache
still runs (on demand) rather than waiting for ever.
"""
from __future__ import annotations

CLIP_MAX_NEW_TOKENS = 4096      # SGLang's CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_RATIO = 0.7                # default_init_new_token_ratio x schedule_conservativeness
MIN_RATIO = INIT_RATIO * 0.14   # x default_min_new_token_ratio_factor
DECAY_PER_STEP = (INIT_RATIO - MIN_RATIO) / 600.0   # default_new_token_ratio_decay_steps
RETRACT_DECODE_STEPS = 20       # global_config.retract_decode_steps


class OutputEstimate:
    """The new-token ratio of one replica's scheduler and the admission test it gives.
    ``max_new_tokens``: the clients' cap on a request's output (SGLang's estimate of an
    uncapped request is the clip, 4096)."""

    __slots__ = ("max_new_tokens", "_start", "_from_step")

    def __init__(self, max_new_tokens: int | None) -> None:
        self.max_new_tokens = max_new_tokens if max_new_tokens is not None \
            else CLIP_MAX_NEW_TOKENS
        self._start = INIT_RATIO
        self._from_step = 0

    def ratio(self, step: int) -> float:
        """The new-token ratio at engine step ``step``."""
        return max(self._start - DECAY_PER_STEP * (step - self._from_step), MIN_RATIO)

    def _left(self, output_tokens: int) -> int:
        """min(max_new_tokens − output, 4096), at least 0: one request's output to come."""
        return max(min(self.max_new_tokens - output_tokens, CLIP_MAX_NEW_TOKENS), 0)

    def reserve_tokens(self, step: int, num_running: int, running_output_tokens: int) -> float:
        """Σ reserve(r) over ``num_running`` requests with ``running_output_tokens``
        output tokens between them."""
        offset = max(self.max_new_tokens - CLIP_MAX_NEW_TOKENS, 0)   # where the clip ends
        left = (num_running * min(self.max_new_tokens, CLIP_MAX_NEW_TOKENS)
                - max(running_output_tokens - num_running * offset, 0))
        return max(left, 0) * self.ratio(step)

    def need_tokens(self, to_compute: int, output_tokens: int) -> int:
        """need(r): a waiting request's tokens still to compute and its output to come."""
        return to_compute + self._left(output_tokens)

    def idle(self, step: int) -> None:
        """Nothing runs: the ratio goes back to its start (SGLang's idle loop)."""
        self._start, self._from_step = INIT_RATIO, step

    def retracted(self, step: int, num_running: int, running_output_tokens: int) -> None:
        """A request was preempted, ``num_running`` with ``running_output_tokens`` output
        tokens are left: the ratio becomes their share of output done plus 20 steps."""
        if num_running == 0:
            self.idle(step)
            return
        ratio = ((running_output_tokens + RETRACT_DECODE_STEPS * num_running)
                 / (num_running * self.max_new_tokens))
        self._start, self._from_step = min(ratio, 1.0), step
