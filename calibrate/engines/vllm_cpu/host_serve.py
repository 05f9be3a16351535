"""Time vLLM V1's host work per step, with a stub in place of the model forward.

Runs inside the vLLM environment (``make vllm`` builds ``.venv-vllm``), never in
fleetsim's: it imports only the standard library, tokenizers, transformers and vLLM.
``calibrate.engines.vllm_cpu.host record`` starts it and reads the log it writes.

    .venv-vllm/bin/python calibrate/engines/vllm_cpu/host_serve.py LOG.jsonl [--reps N] [--seed S]

The engine is vLLM's own ``LLMEngine`` with its engine core in this process; its
executor is :class:`StubExecutor`, which returns one sampled token per scheduled
request the moment it is asked (the approach of the LLM-Emu and Revati emulators:
vLLM's scheduler, KV-cache manager, output processor and detokeniser run as they
are; only the model forward is gone). The model folder holds a Llama-3-8B-shaped
``config.json`` and a byte-level BPE tokenizer trained here on vLLM's own source
files (nothing is downloaded), so detokenisation does real work.

For each grid point (D running decodes, then prefills of P prompt tokens each joining
one step) the engine is driven through: D requests admitted together (one step, a
prefill of PROMPT_TOKENS each), DECODE_STEPS decode steps of the D, then one step per
prefill size with one new request of P tokens (``max_tokens=1``) beside the D
decodes; the D are then aborted. Each repetition visits the grid points in a new
seeded order, so that the machine's drift spreads over all of them; a first pass
warms up and is not logged.

Per logged step (one JSON line): the phase, B (sequences scheduled), prompt tokens
scheduled, decode tokens, and the seconds spent in ``Scheduler.schedule``, the stub
executor, ``Scheduler.update_from_output``, the engine core's whole step (those three
and the rest of ``EngineCore.step``), ``OutputProcessor.process_outputs``, the
detokeniser's share of it, and ``LLMEngine.step`` in all (wall-clock seconds, each
``*_s``); the engine core's step and ``LLMEngine.step`` also in this thread's CPU seconds
(``core_cpu_s``, ``step_cpu_s``: time the machine's other work took the core away does
not count, which on a shared machine is most of the noise); and the seconds
``LLMEngine.add_request`` took for the requests added before the step. The first
line is a header: vLLM's version, the CPU model, the date, the grid.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

FORMAT = "fleetsim-vllm-host-log"
VERSION = 1
DECODES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PREFILL_TOKENS = (128, 512, 2048)
PROMPT_TOKENS = 32          # each decoding request's prompt
DECODE_STEPS = 3            # logged decode steps per grid point and repetition
BLOCK_SIZE = 16             # vLLM's GPU default (the stub has no CPU attention to refuse it)
# twice what the largest grid point holds at once (256 x 4 blocks + a 2048-token prompt):
# the unlogged first pass churns more than this many blocks, so every logged step runs
# with the free queue full of cached blocks, allocation evicting them, as on a warm server
NUM_BLOCKS = 2048
VOCAB_SIZE = 32000
# Llama-3-8B's shape: only its layer count and KV heads reach the host code (KV specs)
MODEL = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
MAX_MODEL_LEN = 8192
ROUND = 9                   # seconds to the nanosecond


def _thread_time_cost_s(n: int = 2001) -> float:
    """The median seconds one ``time.thread_time()`` call takes on this machine."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        time.thread_time()
        samples.append(time.perf_counter() - t0)
    return sorted(samples)[n // 2]


# -- the model folder: config and a tokenizer built here ----------------------------------
def build_model_dir(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    import vllm
    files = sorted(str(p) for p in Path(vllm.__file__).parent.rglob("*.py"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=MAX_MODEL_LEN,
                      rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, torch_dtype="bfloat16", **MODEL)
    cfg.save_pretrained(folder)


# -- the stub executor --------------------------------------------------------------------
def stub_executor_class(vocab_size: int, seed: int):
    """An ``Executor`` that keeps no model: KV specs for the config's layers, and for each
    step one random token per scheduled request, returned at once."""
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.outputs import ModelRunnerOutput

    class StubExecutor(Executor):
        timer_s = 0.0
        partial: set = set()        # requests this step leaves short of their prompt's end

        def _init_executor(self) -> None:
            self.rng = random.Random(seed)

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None,
                           non_block=False):
            # no workers: cache resets and the like have nothing to act on
            if non_block:
                fut: Future = Future()
                fut.set_result([None])
                return fut
            return [None]

        def determine_available_memory(self) -> list[int]:
            return [1 << 40]

        def get_kv_cache_specs(self):
            m = self.model_config
            spec = FullAttentionSpec(block_size=self.cache_config.block_size,
                                     num_kv_heads=m.get_total_num_kv_heads(),
                                     head_size=m.get_head_size(), dtype=m.dtype)
            layers = m.hf_config.num_hidden_layers
            return [{f"model.layers.{i}.self_attn.attn": spec for i in range(layers)}]

        def get_supported_kv_cache_layouts(self):
            return [["NHD"]]

        def set_kv_cache_layout(self, layout_name: str) -> None:
            pass

        def initialize_from_config(self, kv_cache_configs) -> None:
            pass

        def compile_or_warm_up_model(self) -> None:
            pass

        @property
        def supported_tasks(self):
            return ("generate",)

        def execute_model(self, scheduler_output, non_block=False):
            t0 = time.perf_counter()
            ids = list(scheduler_output.num_scheduled_tokens)
            rng, partial = self.rng, self.partial
            # a chunk that stops short of its prompt's end samples nothing
            sampled = [[] if rid in partial else [rng.randrange(3, vocab_size)]
                       for rid in ids]
            out = ModelRunnerOutput(req_ids=ids,
                                    req_id_to_index={r: i for i, r in enumerate(ids)},
                                    sampled_token_ids=sampled)
            StubExecutor.timer_s = time.perf_counter() - t0
            if not non_block:
                return out
            fut: Future = Future()
            fut.set_result(out)
            return fut

        def sample_tokens(self, grammar_output, non_block=False):
            raise NotImplementedError("stub executor: execute_model returns the tokens")

        def take_draft_token_ids(self):
            return None

        def execute_dummy_batch(self) -> None:
            pass

        def check_health(self) -> None:
            pass

        def shutdown(self) -> None:
            pass

    return StubExecutor


def make_engine(model_dir: Path, seed: int, num_blocks: int):
    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine
    executor = stub_executor_class(VOCAB_SIZE, seed)
    args = EngineArgs(
        model=str(model_dir), tokenizer=str(model_dir), dtype="bfloat16",
        max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE,
        num_gpu_blocks_override=num_blocks,
        # every grid step fits the budget whole: D admitted together, a prefill beside D
        max_num_batched_tokens=max(PROMPT_TOKENS * max(DECODES),
                                   max(PREFILL_TOKENS) + max(DECODES)),
        max_num_seqs=2 * max(DECODES), enable_chunked_prefill=True,
        enable_prefix_caching=True, async_scheduling=False, enforce_eager=True, seed=seed,
        distributed_executor_backend=executor, disable_log_stats=False)
    return LLMEngine.from_engine_args(args)


# -- timing hooks -------------------------------------------------------------------------
class Timers:
    """Wraps the engine's host stages to time each step's share of them."""

    def __init__(self, engine) -> None:
        from vllm.v1.engine import detokenizer
        self.t: dict[str, float] = {}
        self.batch: dict = {}
        core = engine.engine_core.engine_core
        sched = core.scheduler
        self.executor = core.model_executor
        self._wrap(sched, "schedule", "schedule_s", self._describe)
        self._wrap(sched, "update_from_output", "update_s")
        self._wrap(engine.engine_core, "get_output", "core_s", cpu=True)
        self._wrap(engine.output_processor, "process_outputs", "output_s")
        timers = self
        inner = detokenizer.BaseIncrementalDetokenizer.update

        def update(det, *a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(det, *a, **kw)
            finally:
                timers.t["detok_s"] = timers.t.get("detok_s", 0.0) + \
                    time.perf_counter() - t0
        detokenizer.BaseIncrementalDetokenizer.update = update
        self.scheduler = sched

    def _wrap(self, obj, name: str, key: str, after=None, cpu: bool = False) -> None:
        """Times ``obj.name`` into ``key`` (wall seconds), and with ``cpu`` also into
        ``key``'s ``_cpu_s`` twin (this thread's CPU seconds: a system call each side,
        about a microsecond, so only around whole stages)."""
        inner = getattr(obj, name)
        timers = self
        cpu_key = key.replace("_s", "_cpu_s")

        def timed(*a, **kw):
            c0 = time.thread_time() if cpu else 0.0
            t0 = time.perf_counter()
            out = inner(*a, **kw)
            t1 = time.perf_counter()
            if cpu:
                timers.t[cpu_key] = timers.t.get(cpu_key, 0.0) + time.thread_time() - c0
            timers.t[key] = timers.t.get(key, 0.0) + t1 - t0
            if after is not None:
                after(out)
                # the hook's own time is taken back out of the stages around it
                timers.t["hook_s"] = timers.t.get("hook_s", 0.0) + time.perf_counter() - t1
            return out
        setattr(obj, name, timed)

    def _describe(self, out) -> None:
        """The step's batch, and which requests stop short of their prompt's end (the stub
        samples nothing for them, as a model runner would not)."""
        reqs = self.scheduler.requests
        prompt = decode = 0
        partial = set()
        for rid, n in out.num_scheduled_tokens.items():
            r = reqs[rid]
            before = r.num_computed_tokens - n      # schedule() already advanced it
            in_prompt = max(0, min(n, r.num_prompt_tokens - before))
            prompt += in_prompt
            decode += n - in_prompt
            if before + n < r.num_prompt_tokens:
                partial.add(rid)
        self.executor.partial = partial
        self.batch = {"B": len(out.num_scheduled_tokens), "prompt_tokens": prompt,
                      "decode_tokens": decode}

    def reset(self) -> None:
        self.t = {}
        self.batch = {}


# -- the grid -----------------------------------------------------------------------------
class Driver:
    def __init__(self, engine, timers: Timers, seed: int, clock_read_s: float) -> None:
        self.engine, self.timers = engine, timers
        self.clock_read_s = clock_read_s        # one time.thread_time() call
        self.rng = random.Random(seed)
        self.next_id = 0

    def _prompt(self, tokens: int) -> list[int]:
        return [self.rng.randrange(3, VOCAB_SIZE) for _ in range(tokens)]

    def _add(self, prompts: list[list[int]], max_tokens: int) -> tuple[list[str], float]:
        """Adds a request per prompt; their ids, and the seconds ``add_request`` took."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0,
                                detokenize=True)
        rids = [f"r{self.next_id + i}" for i in range(len(prompts))]
        self.next_id += len(prompts)
        t0 = time.perf_counter()
        for rid, ids in zip(rids, prompts):
            self.engine.add_request(rid, TokensPrompt(prompt_token_ids=ids), params)
        return rids, time.perf_counter() - t0

    def _step(self, phase: str, add_s: float, rows: list | None, point: dict) -> None:
        self.timers.reset()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        self.engine.step()
        step_s = time.perf_counter() - t0
        # less the CPU clock reads inside this window: about one of this pair's, and the
        # core stage's two
        step_cpu_s = time.thread_time() - c0 - 3 * self.clock_read_s
        t = self.timers.t
        if rows is None:
            return
        row = {"phase": phase, **point, **self.timers.batch, "add_s": add_s,
               "schedule_s": t.get("schedule_s", 0.0),
               "execute_s": self.timers.executor.timer_s,
               "update_s": t.get("update_s", 0.0),
               "core_s": t.get("core_s", 0.0) - t.get("hook_s", 0.0),
               "output_s": t.get("output_s", 0.0), "detok_s": t.get("detok_s", 0.0),
               "step_s": step_s - t.get("hook_s", 0.0),
               "core_cpu_s": max(0.0, t.get("core_cpu_s", 0.0) - t.get("hook_s", 0.0)
                                 - self.clock_read_s),
               "step_cpu_s": max(0.0, step_cpu_s - t.get("hook_s", 0.0))}
        rows.append({k: round(v, ROUND) if isinstance(v, float) else v
                     for k, v in row.items()})

    def point(self, decodes: int, rows: list | None, rep: int) -> None:
        """One grid point: ``decodes`` running requests, then each prefill size beside them."""
        where = {"rep": rep, "decodes": decodes}
        running = []
        if decodes:
            running, add_s = self._add([self._prompt(PROMPT_TOKENS) for _ in range(decodes)],
                                       10_000)
            self._step("admit", add_s, rows, {**where, "prefill": 0})
            for _ in range(DECODE_STEPS):
                self._step("decode", 0.0, rows, {**where, "prefill": 0})
        for p in PREFILL_TOKENS:
            _, add_s = self._add([self._prompt(p)], 1)
            self._step("prefill", add_s, rows, {**where, "prefill": p})
        self.engine.abort_request(running)
        while self.engine.has_unfinished_requests():
            self.engine.step()


def cpu_model() -> str:
    """The CPU's name with its family, model and stepping (``calibrate.microbench.timing.device_name``
    gives the name alone, which in this machine's virtual CPU is just "AMD EPYC"; this
    script runs outside the package, in the vLLM environment)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    fields = {}
    for line in info.splitlines():
        if ":" in line:
            k, v = (s.strip() for s in line.split(":", 1))
            fields.setdefault(k, v)
        elif fields:
            break
    return (f"{fields.get('model name', 'unknown')} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')}, stepping {fields.get('stepping', '?')}; "
            f"{os.cpu_count()} CPUs)")


def record(log_path: Path, reps: int, seed: int, num_blocks: int = NUM_BLOCKS) -> None:
    import vllm
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fleetsim-vllm-host-") as work:
        build_model_dir(Path(work))
        engine = make_engine(Path(work), seed, num_blocks)
        timers = Timers(engine)
        clock_read_s = _thread_time_cost_s()
        driver = Driver(engine, timers, seed, clock_read_s)
        order_rng = random.Random(seed)
        for d in DECODES:                                     # warm-up, not logged
            driver.point(d, None, -1)
        rows: list[dict] = []
        for rep in range(reps):
            order = list((0,) + DECODES)
            order_rng.shuffle(order)
            for d in order:
                driver.point(d, rows, rep)
    header = {"format": FORMAT, "version": VERSION, "vllm": vllm.__version__,
              "cpu": cpu_model(), "python": platform.python_version(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              # the machine's load averages (1, 5, 15 min) before and after: other work
              # on its cores slows the wall clock and, less, the CPU clock
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()],
              "reps": reps, "seed": seed, "thread_time_call_s": round(clock_read_s, ROUND), "decodes": list(DECODES),
              "prefill_tokens": list(PREFILL_TOKENS), "prompt_tokens_per_decode": PROMPT_TOKENS,
              "decode_steps": DECODE_STEPS, "block_size": BLOCK_SIZE,
              "num_blocks": num_blocks, "model": MODEL,
              "executor": "stub (one random token per request, no forward)",
              "tokenizer": f"byte-level BPE, {VOCAB_SIZE} tokens, trained on vLLM's sources"}
    tmp = log_path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(header, separators=(",", ":")) + "\n")
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    tmp.replace(log_path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="host_serve.py")
    parser.add_argument("log")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-blocks", type=int, default=NUM_BLOCKS)
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    record(Path(args.log), args.reps, args.seed, args.num_blocks)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
