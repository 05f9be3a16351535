"""A real serving engine on this machine: Hugging Face transformers.

Two engines, both running a Llama model built from a model profile's config
with random weights (nothing is downloaded):

- ``ContinuousEngine``: transformers' continuous batching
  (``model.init_continuous_batching``; a background thread runs the FIFO
  scheduler over a paged KV cache, with ``add_request`` / ``get_result``).
  Its limits are the ones fleetsim's ``continuous`` scheduler takes: a token
  budget per step (``max_batch_tokens``), a sequence cap
  (``max_requests_per_batch``), the page (block) size and the number of KV
  blocks. Each engine step is logged with its batch shape and duration, by
  wrapping the batch processor's ``prepare_next_batch`` and ``update_batch``.
- ``SequentialEngine``: plain ``model.generate``, one request at a time in
  arrival order (the "version 1" baseline of fleetsim's ``single``
  scheduler); a streamer stamps each token.

``run(requests)`` replays a list of ``EngineRequest`` at their arrival times
(seconds from the start of the run) and returns one ``EngineRecord`` per
request: arrival, first token and finish, on the engine's own clock.
Outputs have exactly ``output_tokens`` tokens: end-of-sequence is disabled.
"""
from __future__ import annotations

import logging
import math
import queue
import threading
import time

import numpy as np
import torch

from calibrate.engines.records import ContinuousLimits, EngineRecord, EngineRequest, EngineStep
from calibrate.fitting.shapes import ModelShape

__all__ = ["ContinuousEngine", "ContinuousLimits", "EngineRecord", "EngineRequest", "EngineStep",
           "SequentialEngine", "build_model", "transformers_version"]

ROPE_THETA = 500000.0


def transformers_version() -> str:
    import transformers
    return transformers.__version__


def build_model(shape: ModelShape, seed: int = 0, max_positions: int | None = None):
    """A LlamaForCausalLM of ``shape`` with random weights, fp32, eval mode."""
    if shape.num_experts != 1:
        raise ValueError(f"validation supports dense models only; {shape.name} has "
                         f"{shape.num_experts} experts")
    from transformers import LlamaConfig, LlamaForCausalLM
    logging.getLogger("transformers").setLevel(logging.ERROR)
    cfg = LlamaConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
        intermediate_size=shape.ffn_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, max_position_embeddings=max_positions or shape.max_model_len,
        rope_theta=ROPE_THETA, tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def _prompts(requests: list[EngineRequest], vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, r.prompt_tokens).tolist() for r in requests]


def _replay(requests: list[EngineRequest], submit) -> float:
    """Call ``submit(i)`` for each request at its arrival time; returns the start time."""
    t0 = time.perf_counter()
    for i, r in enumerate(requests):
        delay = t0 + r.arrival_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        submit(i)
    return t0


def _logged_manager_class():
    """transformers' continuous batching manager, subclassed so that each of its steps is
    logged on the manager itself: the scheduled (new tokens, cached context, is-prefill)
    of each sequence and the step's duration (prepare -> forward -> update, one pass of
    the generation loop's body). Built on first use: transformers is optional."""
    from transformers.generation.continuous_batching.continuous_api import (
        ContinuousBatchingManager)

    class LoggedManager(ContinuousBatchingManager):
        def __init__(self, *args, steps: list, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.steps = steps              # EngineStep per step, appended by the loop
            self._shape: tuple | None = None
            self._last_end_s = -math.inf

        def _generation_loop_body(self, batch_processor, bootstrapping: bool) -> bool:
            start = time.perf_counter()
            self._shape = None
            more = super()._generation_loop_body(batch_processor, bootstrapping)
            if self._shape is not None and not bootstrapping:   # a step ran and updated
                end = time.perf_counter()
                self.steps.append(EngineStep(start, end, self._shape,
                                             start - self._last_end_s))
                self._last_end_s = end
            return more

        def _generation_step(self) -> None:
            # the batch prepare_next_batch made (the synchronous inputs of a CPU engine):
            # each chunk's context is its offset before this step's tokens; a sequence
            # that has produced no token yet computes its prompt, even a chunk of one
            batch = self.batch_processor.inputs_and_outputs.requests_in_batch
            self._shape = tuple((f.query_length, f.state.position_offset - f.query_length,
                                 f.state.generated_len() == 0) for f in batch)
            super()._generation_step()

    return LoggedManager


class ContinuousEngine:
    """transformers' continuous batching, with every step logged."""

    name = "transformers-continuous-batching"

    def __init__(self, shape: ModelShape, limits: ContinuousLimits, threads: int = 1,
                 seed: int = 0) -> None:
        torch.set_num_threads(threads)
        self.shape = shape
        self.limits = limits
        self.seed = seed
        self.model = build_model(shape, seed)
        self.steps: list[EngineStep] = []
        self._mgr = None
        self._runs = 0

    def _manager(self):
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
        gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                               max_new_tokens=16)
        lim = self.limits
        # safety_margin 0: admit new prompts until the cache is full, as vLLM does
        cb = ContinuousBatchingConfig(
            page_size=lim.page_size, num_blocks=lim.num_blocks,
            max_batch_tokens=lim.max_batch_tokens,
            max_requests_per_batch=lim.max_requests_per_batch, safety_margin=0.0,
            allow_block_sharing=False, seed=self.seed)
        # what model.init_continuous_batching builds, with every step logged into self.steps
        return _logged_manager_class()(model=self.model, generation_config=gen,
                                       continuous_batching_config=cb, steps=self.steps)

    def start(self) -> None:
        """Start the engine and warm it up: a prompt of two full token budgets, so the
        batch buffers are touched before anything is timed. ``run`` starts it if needed;
        a started engine serves several ``run`` calls, as a server stays up."""
        if self._mgr is not None:
            return
        mgr = None
        try:
            mgr = self._manager()
            mgr.start()
            deadline = time.perf_counter() + 120
            while getattr(mgr, "batch_processor", None) is None:   # built by the thread
                if time.perf_counter() > deadline or not mgr.is_running():
                    raise RuntimeError("the engine's generation loop did not start")
                time.sleep(0.005)
            lim = self.limits
            warm = max(8, min(2 * lim.max_batch_tokens,
                              (lim.num_blocks - 1) * lim.page_size - 2))
            for i, n in enumerate((warm, 8)):
                mgr.add_request([1] * n, request_id=f"warmup{i}", max_new_tokens=2)
                out = mgr.get_result(request_id=f"warmup{i}", timeout=120)
                if out is None or out.error:
                    raise RuntimeError("the engine did not serve its warm-up requests"
                                       + (f": {out.error}" if out is not None else ""))
        except BaseException:
            if mgr is not None:
                mgr.stop(block=True, timeout=30)
            raise
        self._mgr = mgr

    def stop(self) -> None:
        if self._mgr is None:
            return
        try:
            self._mgr.stop(block=True, timeout=30)
        finally:
            self._mgr = None

    def __enter__(self) -> "ContinuousEngine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @torch.inference_mode()
    def run(self, requests: list[EngineRequest], timeout_s: float = 600.0
            ) -> list[EngineRecord]:
        prompts = _prompts(requests, self.shape.vocab_size, self.seed)
        started_here = self._mgr is None
        self.start()
        mgr = self._mgr
        self._runs += 1
        try:
            self.steps.clear()
            ids = [f"run{self._runs}-r{i}" for i in range(len(requests))]

            def submit(i: int) -> None:
                mgr.add_request(prompts[i], request_id=ids[i],
                                max_new_tokens=requests[i].output_tokens,
                                record_timestamps=True)

            t0 = _replay(requests, submit)
            results = {}
            deadline = time.perf_counter() + timeout_s
            while len(results) < len(ids):
                out = mgr.get_result(timeout=max(0.1, deadline - time.perf_counter()))
                if out is None:
                    raise RuntimeError(f"the engine finished {len(results)} of {len(ids)} "
                                       f"requests within {timeout_s:.0f} s")
                if out.error:
                    raise RuntimeError(f"the engine failed request {out.request_id}: "
                                       f"{out.error}")
                results[out.request_id] = out
            # the step that produced the last token is logged just after its result is out
            last_stamp = max(out.timestamps[-1] for out in results.values())
            wait_until = time.perf_counter() + 5.0
            while not (self.steps and self.steps[-1].end_s >= last_stamp) and \
                    time.perf_counter() < wait_until:
                time.sleep(0.001)
        finally:
            if started_here:
                self.stop()
        # in place: the step log appends to this very list
        self.steps[:] = [EngineStep(s.start_s - t0, s.end_s - t0, s.seqs, s.idle_before_s)
                         for s in self.steps]
        records = []
        for rid, req in zip(ids, requests):
            out = results[rid]
            stamps = out.timestamps
            if len(out.generated_tokens) != req.output_tokens or not stamps:
                raise RuntimeError(f"request {rid} produced {len(out.generated_tokens)} "
                                   f"tokens, expected {req.output_tokens}")
            records.append(EngineRecord(out.created_time - t0, stamps[0] - t0, stamps[-1] - t0,
                                        req.prompt_tokens, req.output_tokens))
        return records


class _Stamps:
    """A generate() streamer that records when each new token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:          # the first call hands over the prompt
            self._prompt_seen = True
            return
        now = time.perf_counter()
        self.times.extend([now] * int(np.asarray(value).size))

    def end(self) -> None:
        pass


class SequentialEngine:
    """``model.generate``, one request at a time in arrival order (FCFS)."""

    name = "transformers-generate"

    def __init__(self, shape: ModelShape, threads: int = 1, seed: int = 0) -> None:
        torch.set_num_threads(threads)
        self.shape = shape
        self.seed = seed
        self.model = build_model(shape, seed)

    @torch.inference_mode()
    def generate(self, prompt: list[int], output_tokens: int) -> list[float]:
        """Token times of one request."""
        stamps = _Stamps()
        ids = torch.tensor([prompt])
        self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                            max_new_tokens=output_tokens, min_new_tokens=output_tokens,
                            eos_token_id=None, pad_token_id=0, streamer=stamps)
        return stamps.times

    def run(self, requests: list[EngineRequest], timeout_s: float = 600.0
            ) -> list[EngineRecord]:
        prompts = _prompts(requests, self.shape.vocab_size, self.seed)
        self.generate([1] * 8, 2)          # warm-up
        arrived: queue.Queue = queue.Queue()
        records: list[EngineRecord | None] = [None] * len(requests)
        errors: list[BaseException] = []

        def serve() -> None:
            try:
                for _ in requests:
                    i, arrival = arrived.get(timeout=timeout_s)
                    times = self.generate(prompts[i], requests[i].output_tokens)
                    records[i] = EngineRecord(arrival, times[0], times[-1],
                                              requests[i].prompt_tokens,
                                              requests[i].output_tokens)
            except BaseException as exc:            # noqa: BLE001 - re-raised below
                errors.append(exc)

        worker = threading.Thread(target=serve, daemon=True)
        worker.start()
        t0 = _replay(requests, lambda i: arrived.put((i, time.perf_counter())))
        worker.join(timeout_s)
        if errors:
            raise errors[0]
        if worker.is_alive() or any(r is None for r in records):
            raise RuntimeError(f"generate() did not finish {len(requests)} requests "
                               f"within {timeout_s:.0f} s")
        for r in records:
            r.arrival_s -= t0
            r.first_token_s -= t0
            r.finish_s -= t0
        return records
