"""Serve a plan of requests on the real vLLM engine (CPU build) and log everything.

Runs inside the vLLM environment (``make vllm`` builds ``.venv-vllm``), never in
fleetsim's: it imports only the standard library, torch, transformers and vLLM.
``calibrate.engines.vllm_cpu.engine`` writes the plan, starts this script and reads its log.

    .venv-vllm/bin/python calibrate/engines/vllm_cpu/serve.py PLAN.json LOG.json

The plan (JSON) names the model's shape, the engine's settings and the requests
(arrival time, prompt token ids, output length, priority). The model is a Llama of
that shape with random weights, saved to a temporary folder (nothing is
downloaded). The engine is vLLM's V1 ``LLMEngine`` with its engine core in this
process, driven at the requests' arrival times: before each engine step every request
whose arrival time has passed is added (the engine core likewise drains its input
queue between steps), then one step runs (schedule, forward, update).

Before the workload the engine serves the plan's calibration grid (runs of synthetic
requests, ``calibrate.engines.step_fit.continuous_grid``) twice: once to warm up (the first
steps of each new batch shape run many times slower), then, every other run after an
idle pause, with its steps logged apart: the step-time terms are fitted on them, never on the
workload.

Between steps, about every ``Sentinel.EVERY_S`` of the engine's time, a sentinel runs: a
fixed piece of the model's own dense work (its layers' matrix products at a decode's and a
prefill chunk's rows, in plain torch on the engine's threads), timed. Its times during the
grid and during the workload say how the machine's speed moved between them and within
each, without looking at the engine's steps; the clock the log keeps stops while it runs,
so the workload's arrivals and steps are timed as if it had not run.

The log (JSON) holds, per request: when it was added, its first token and finish on
this process's clock, vLLM's own first-token latency, preemptions and prompt tokens
served from the prefix cache; per step: its start and end, the requests added just
before it, and each scheduled request's new tokens, tokens computed before the step,
known tokens and whether it came from the waiting queue (with the prefix-cache hit it
got there), and the requests the step preempted.
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

FORMAT = "fleetsim-vllm-serve-log"
VERSION = 1


def build_model(shape: dict, folder: Path, dtype: str, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(
        vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
        intermediate_size=shape["ffn_size"], num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"], num_key_value_heads=shape["num_kv_heads"],
        head_dim=shape["head_dim"], max_position_embeddings=shape["max_model_len"],
        rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.to(getattr(torch, dtype)).save_pretrained(folder)


def make_engine(plan: dict, model_dir: Path):
    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine
    e = plan["engine"]
    args = EngineArgs(
        model=str(model_dir), skip_tokenizer_init=True, dtype=plan["dtype"],
        max_model_len=e["max_model_len"], block_size=e["block_size"],
        # vLLM keeps one block back (its null block): one more makes e["num_blocks"] usable
        num_gpu_blocks_override=e["num_blocks"] + 1,
        max_num_batched_tokens=e["max_num_batched_tokens"], max_num_seqs=e["max_num_seqs"],
        enable_chunked_prefill=e["chunked_prefill"],
        enable_prefix_caching=e["prefix_caching"], scheduling_policy=e["policy"],
        scheduler_reserve_full_isl=e["kv_admission"] == "whole_prompt",
        async_scheduling=False, enforce_eager=True, seed=plan.get("seed", 0),
        # on CPU the share of memory vLLM checks is free at start (the cache itself is
        # num_gpu_blocks_override): low, so another process does not stop the run
        gpu_memory_utilization=0.3,
        disable_log_stats=True)
    return LLMEngine.from_engine_args(args)


class StepLog:
    """Wraps the engine core's ``Scheduler.schedule`` to log each step's batch."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.pending: dict | None = None
        inner = scheduler.schedule

        def schedule(*a, **kw):
            before = {r.request_id for r in scheduler.running}
            out = inner(*a, **kw)
            self.pending = self._describe(out, before)
            return out

        scheduler.schedule = schedule

    def _describe(self, out, running_before: set[str]) -> dict:
        reqs = self.scheduler.requests
        seqs = []
        computed = {n.req_id: n.num_computed_tokens for n in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
            computed[rid] = n
        for rid, new in out.num_scheduled_tokens.items():
            r = reqs.get(rid)
            seqs.append({
                "id": rid, "new": int(new), "computed": int(computed.get(rid, -1)),
                "known": int(r.num_tokens) if r is not None else -1,
                "prompt": int(r.num_prompt_tokens) if r is not None else -1,
                "from_waiting": rid not in running_before})
        preempted = sorted(out.preempted_req_ids or ())
        return {"seqs": seqs, "preempted": preempted}


# the clock the log keeps (a test may replace it)
clock = time.perf_counter


class Sentinel:
    """A fixed piece of the model's dense work, timed between engine steps: every layer's
    four matrix products at ``DECODE_ROWS`` rows (weights read once, as a decode step reads
    them) and one layer's at ``PREFILL_ROWS`` (compute-bound, as a prefill chunk). Random
    weights of the model's shapes and dtype, built once and warmed up; it runs on the
    engine's own torch threads; each part timed ``REPEATS`` times, the fastest kept.
    ``log`` holds one record per run: the phase, how many steps of that phase were logged
    before it, and its seconds."""

    EVERY_S = 0.5
    REPEATS = 3
    DECODE_ROWS = 8
    PREFILL_ROWS = 64
    WARMUP = 5

    def __init__(self, shape: dict, dtype: str, seed: int) -> None:
        import torch
        gen = torch.Generator().manual_seed(seed + 7919)
        dt = getattr(torch, dtype)
        h, f = shape["hidden_size"], shape["ffn_size"]
        q = shape["num_heads"] * shape["head_dim"]
        kv = shape["num_kv_heads"] * shape["head_dim"]
        layer = ((q + 2 * kv, h), (h, q), (2 * f, h), (h, f))       # (out, in) each
        rand = lambda *dims: (torch.randn(*dims, generator=gen) * 0.02).to(dt)
        self.weights = [rand(o, i) for _ in range(shape["num_layers"]) for o, i in layer]
        self.decode_in = [rand(self.DECODE_ROWS, i) for _, i in layer]
        self.prefill_in = [rand(self.PREFILL_ROWS, i) for _, i in layer]
        self.torch = torch
        self.log: list[dict] = []
        self.phase = "calibration"
        self.steps_before = 0          # steps of this phase logged before the current drive
        self.busy_s = 0.0              # the engine's step time since the last run
        for _ in range(self.WARMUP):   # oneDNN builds its kernels on first use
            self._work()

    def _work(self) -> tuple[float, float]:
        """The fastest of ``REPEATS`` passes of each part (a lone pass takes a thread's
        wake-up or a cache refill with it: the machine's speed is what the fastest shows)."""
        linear = self.torch.nn.functional.linear
        decode_s = prefill_s = float("inf")
        with self.torch.inference_mode():
            for _ in range(self.REPEATS):
                t0 = clock()
                for i, w in enumerate(self.weights):
                    linear(self.decode_in[i % 4], w)
                t1 = clock()
                for i, w in enumerate(self.weights[:4]):
                    linear(self.prefill_in[i], w)
                t2 = clock()
                decode_s, prefill_s = min(decode_s, t1 - t0), min(prefill_s, t2 - t1)
        return decode_s, prefill_s

    def due(self) -> bool:
        """The engine has stepped ``EVERY_S`` since the last run (across drives)."""
        return self.busy_s >= self.EVERY_S

    def run(self, steps_logged: int) -> float:
        """Run and log it; its seconds (the log's clock stops for them)."""
        self.busy_s = 0.0
        start = clock()
        decode_s, prefill_s = self._work()
        self.log.append({"phase": self.phase, "after_step": self.steps_before + steps_logged,
                         "seconds": decode_s + prefill_s, "decode_s": decode_s,
                         "prefill_s": prefill_s})
        return clock() - start


def _drive(engine, steplog: StepLog, requests: list[dict],
           sentinel: Sentinel | None = None) -> tuple[list[dict], dict]:
    """Serve ``requests`` (arrival_s from now) until the engine is empty: the steps it ran
    and a record per request, times from the call. With a ``sentinel``, it runs between
    steps each time the engine has stepped ``Sentinel.EVERY_S``, with the clock stopped."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    pending = sorted(requests, key=lambda r: (r["arrival_s"], str(r["id"])))
    reqs = {r["id"]: {"id": r["id"], "arrival_s": None, "first_token_s": None,
                      "finish_s": None, "prompt_tokens": len(r["prompt"]),
                      "output_tokens": r["max_tokens"], "priority": r.get("priority", 0)}
            for r in pending}
    steps: list[dict] = []
    i = 0
    t0 = clock()
    busy = False                   # the last pass ran a step
    while i < len(pending) or engine.has_unfinished_requests():
        # between two steps of a busy engine only (a step after an idle engine keeps the
        # idle gap the grid timed)
        if sentinel is not None and busy and sentinel.due():
            t0 += sentinel.run(len(steps))       # the clock stops while it runs
        now = clock() - t0
        added = []
        while i < len(pending) and pending[i]["arrival_s"] <= now:
            r = pending[i]
            params = SamplingParams(max_tokens=r["max_tokens"], min_tokens=r["max_tokens"],
                                    ignore_eos=True, temperature=0.0, detokenize=False)
            engine.add_request(r["id"], TokensPrompt(prompt_token_ids=r["prompt"]), params,
                               priority=r.get("priority", 0))
            reqs[r["id"]]["arrival_s"] = clock() - t0
            added.append(r["id"])
            i += 1
        if not engine.has_unfinished_requests():
            busy = False
            time.sleep(max(0.0, pending[i]["arrival_s"] - (clock() - t0)))
            continue
        start = clock() - t0
        steplog.pending = None
        outputs = engine.step()
        end = clock() - t0
        busy = True
        if sentinel is not None:
            sentinel.busy_s += end - start
        if steplog.pending is not None and steplog.pending["seqs"]:
            steps.append({"start_s": start, "end_s": end, "added": added, **steplog.pending})
        elif added and steps:
            steps[-1].setdefault("added_after", []).extend(added)
        for o in outputs:
            rec = reqs[o.request_id]
            n = len(o.outputs[0].token_ids) if o.outputs else 0
            if n and rec["first_token_s"] is None:
                rec["first_token_s"] = end
            if o.finished:
                rec["finish_s"] = end
                rec["generated"] = n
                rec["cached_tokens"] = int(o.num_cached_tokens or 0)
                m = o.metrics
                if m is not None:
                    ftl = getattr(m, "first_token_latency", None)
                    rec["first_token_latency_s"] = None if ftl is None else float(ftl)
    return steps, reqs


# before every other calibration run, in turn, the engine sits idle this long (as
# calibrate.engines.step_fit's grid does on transformers: a step after an idle engine is slower)
IDLE_PAUSES_S = (0.5, 2.0)


def serve(plan: dict, log_path: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="fleetsim-vllm-model-") as work:
        build_model(plan["model"], Path(work), plan["dtype"], plan.get("seed", 0))
        engine = make_engine(plan, Path(work))
    core = engine.engine_core.engine_core
    steplog = StepLog(core.scheduler)
    # the calibration grid first (its own request ids), then the workload
    rng = random.Random(plan.get("seed", 0))
    vocab = plan["model"]["vocab_size"]
    calibration = []
    sentinel = Sentinel(plan["model"], plan["dtype"], plan.get("seed", 0))
    # a pass over the grid first, not logged: the engine's first steps of each new shape
    # run many times slower (oneDNN builds its kernels on first use)
    for g, run in enumerate(plan.get("calibration", [])):
        _drive(engine, steplog, [
            {"id": f"w{g}.{k}", "arrival_s": r["arrival_s"], "max_tokens": r["max_tokens"],
             "prompt": [rng.randrange(3, vocab) for _ in range(r["prompt_tokens"])]}
            for k, r in enumerate(run)])
    last_end = time.perf_counter()
    for g, run in enumerate(plan.get("calibration", [])):
        if g % 2:
            time.sleep(IDLE_PAUSES_S[(g // 2) % len(IDLE_PAUSES_S)])
        reqs = [{"id": f"c{g}.{k}", "arrival_s": r["arrival_s"], "max_tokens": r["max_tokens"],
                 "prompt": [rng.randrange(3, vocab) for _ in range(r["prompt_tokens"])]}
                for k, r in enumerate(run)]
        # the engine's idle time before this run's clock starts (its steps' times count
        # from that start): the first step's idle is this plus its own start
        idle_before_s = time.perf_counter() - last_end
        sentinel.steps_before = len(calibration)
        run_steps, _ = _drive(engine, steplog, reqs, sentinel)
        last_end = time.perf_counter()
        calibration += [{"run": g, "idle_before_s": idle_before_s, **st} for st in run_steps]
    time.sleep(IDLE_PAUSES_S[-1])
    sentinel.phase, sentinel.steps_before, sentinel.busy_s = "workload", 0, 0.0
    steps, reqs = _drive(engine, steplog, plan["requests"], sentinel)
    import torch
    import transformers
    import vllm
    return {"format": FORMAT, "version": VERSION, "requests": list(reqs.values()),
            "steps": steps, "calibration": calibration, "sentinels": sentinel.log,
            "meta": {"vllm": vllm.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "threads": torch.get_num_threads()}}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: serve.py PLAN.json LOG.json", file=sys.stderr)
        return 2
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    plan = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    log_path = Path(argv[1])
    log = serve(plan, log_path)
    tmp = log_path.with_suffix(".part")
    tmp.write_text(json.dumps(log, separators=(",", ":")), encoding="utf-8")
    tmp.replace(log_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
