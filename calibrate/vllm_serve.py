"""Serve a plan of requests on the real vLLM engine (CPU build) and log everything.

Runs inside the vLLM environment (``make vllm`` builds ``.venv-vllm``), never in
fleetsim's: it imports only the standard library, torch, transformers and vLLM.
``calibrate.vllm_engine`` writes the plan, starts this script and reads its log.

    .venv-vllm/bin/python calibrate/vllm_serve.py PLAN.json LOG.json

The plan (JSON) names the model's shape, the engine's settings and the requests
(arrival time, prompt token ids, output length, priority). The model is a Llama of
that shape with random weights, saved to a temporary folder (nothing is
downloaded). The engine is vLLM's V1 ``LLMEngine`` with its engine core in this
process, driven at the requests' arrival times: before each engine step every request
whose arrival time has passed is added (the engine core likewise drains its input
queue between steps), then one step runs (schedule, forward, update).

Before the workload the engine serves the plan's calibration grid (runs of synthetic
requests, ``calibrate.engine_fit.continuous_grid``) twice: once to warm up (the first
steps of each new batch shape run many times slower), then, every other run after an
idle pause, with its steps logged apart: the step-time terms are fitted on them, never on the
workload.

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


def _drive(engine, steplog: StepLog, requests: list[dict]) -> tuple[list[dict], dict]:
    """Serve ``requests`` (arrival_s from now) until the engine is empty: the steps it ran
    and a record per request, times from the call."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    pending = sorted(requests, key=lambda r: (r["arrival_s"], str(r["id"])))
    reqs = {r["id"]: {"id": r["id"], "arrival_s": None, "first_token_s": None,
                      "finish_s": None, "prompt_tokens": len(r["prompt"]),
                      "output_tokens": r["max_tokens"], "priority": r.get("priority", 0)}
            for r in pending}
    steps: list[dict] = []
    i = 0
    t0 = time.perf_counter()
    while i < len(pending) or engine.has_unfinished_requests():
        now = time.perf_counter() - t0
        added = []
        while i < len(pending) and pending[i]["arrival_s"] <= now:
            r = pending[i]
            params = SamplingParams(max_tokens=r["max_tokens"], min_tokens=r["max_tokens"],
                                    ignore_eos=True, temperature=0.0, detokenize=False)
            engine.add_request(r["id"], TokensPrompt(prompt_token_ids=r["prompt"]), params,
                               priority=r.get("priority", 0))
            reqs[r["id"]]["arrival_s"] = time.perf_counter() - t0
            added.append(r["id"])
            i += 1
        if not engine.has_unfinished_requests():
            time.sleep(max(0.0, pending[i]["arrival_s"] - (time.perf_counter() - t0)))
            continue
        start = time.perf_counter() - t0
        steplog.pending = None
        outputs = engine.step()
        end = time.perf_counter() - t0
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
# calibrate.engine_fit's grid does on transformers: a step after an idle engine is slower)
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
        run_steps, _ = _drive(engine, steplog, reqs)
        last_end = time.perf_counter()
        calibration += [{"run": g, "idle_before_s": idle_before_s, **st} for st in run_steps]
    time.sleep(IDLE_PAUSES_S[-1])
    steps, reqs = _drive(engine, steplog, plan["requests"])
    import torch
    import transformers
    import vllm
    return {"format": FORMAT, "version": VERSION, "requests": list(reqs.values()),
            "steps": steps, "calibration": calibration,
            "meta": {"vllm": vllm.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "threads": torch.get_num_threads()}}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_serve.py PLAN.json LOG.json", file=sys.stderr)
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
