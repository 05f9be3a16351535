"""Schedule equivalence with vLLM: fleetsim's scheduler teacher-forced on a vLLM log.

vLLM's log (``calibrate.engines.vllm_cpu.serve``) says, step by step, which requests the engine had
been handed and what its scheduler did with them: each scheduled request's new tokens
and the tokens it had computed before, whether it came from the waiting queue (and
then how much of its prompt the prefix cache gave it), and whom the step preempted.

``replay`` hands fleetsim's ``continuous`` scheduler (its ``ContinuousScheduler`` with
its ``KvCacheManager``, outside any simulation) the same requests before the same step
(arrivals are counted in steps, not seconds: which step first saw a request does not
depend on how fast either side is), runs one step at a time with vLLM's measured step
start and duration as the clock (teacher forcing: the priority policy's ages and the
requests' times follow the engine's clock) and records the same things for each step.
``compare`` lines the two up step by step and sorts every step that differs by what
differs first.

Nothing here needs vLLM or torch: a recorded log is enough.
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.engines.vllm_cpu.serve import FORMAT as SERVE_FORMAT
from sim.config.inputs import InputFileError, open_regular
from sim.entities.kv import KvCacheManager
from sim.entities.request import Request
from sim.schedulers.base import ReplicaLimits
from sim.schedulers.continuous import ContinuousScheduler
from sim.schedulers.continuous_config import ContinuousConfig

# what a step's difference is called, in the order they are looked for
KINDS = ("batch", "new_tokens", "computed", "prefix_hit", "preempted", "extra_step",
         "missing_step")
KIND_TEXT = {
    "batch": "a different set of requests scheduled",
    "new_tokens": "the same requests, different new tokens for some",
    "computed": "the same tokens, a different count of tokens computed before the step",
    "prefix_hit": "a different prefix-cache hit for a request taken from the waiting queue",
    "preempted": "a different set of requests preempted",
    "extra_step": "fleetsim ran a step vLLM did not",
    "missing_step": "vLLM ran a step fleetsim did not",
}


class ServeLogError(ValueError):
    """A file that is not a readable vLLM serve log (named, with the field at fault)."""


@dataclass(frozen=True)
class StepBatch:
    """One step's schedule: request id -> (new tokens, computed before); the ids taken
    from the waiting queue -> tokens they had computed when taken (prefix-cache hit);
    the ids preempted."""

    seqs: dict[int, tuple[int, int]]
    from_waiting: dict[int, int]
    preempted: frozenset[int]

    def kind_of_difference(self, other: "StepBatch") -> str | None:
        if set(self.seqs) != set(other.seqs):
            return "batch"
        if any(self.seqs[i][0] != other.seqs[i][0] for i in self.seqs):
            return "new_tokens"
        if any(self.seqs[i][1] != other.seqs[i][1] for i in self.seqs):
            return "computed"
        if self.from_waiting != other.from_waiting:
            return "prefix_hit"
        if self.preempted != other.preempted:
            return "preempted"
        return None

    def brief(self) -> dict:
        return {"seqs": {str(i): list(v) for i, v in sorted(self.seqs.items())},
                "from_waiting": {str(i): v for i, v in sorted(self.from_waiting.items())},
                "preempted": sorted(self.preempted)}


@dataclass(frozen=True)
class PlanRequest:
    id: int
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_group: str | None = None
    prefix_tokens: int = 0


@dataclass(frozen=True)
class EngineSettings:
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    num_blocks: int
    chunked_prefill: bool
    prefix_caching: bool
    policy: str
    max_model_len: int
    kv_admission: str            # "whole_prompt" (vLLM's default) or "on_demand"


@dataclass
class ServeLog:
    """A vLLM serve log with its plan's requests and settings."""

    settings: EngineSettings
    requests: dict[int, PlanRequest]
    arrival_s: dict[int, float]              # when each request was handed to the engine
    steps: list[dict]                        # start_s, end_s, added, seqs, preempted
    records: list[dict]                      # per request: first token, finish, ...
    meta: dict = field(default_factory=dict)

    def batches(self) -> list[StepBatch]:
        return batches(self.steps)

    def added_before(self) -> list[list[int]]:
        """The requests handed to the engine before each step (and after the one before)."""
        out, carry = [], []
        for step in self.steps:
            out.append(carry + [_rid(r) for r in step.get("added", ())])
            carry = [_rid(r) for r in step.get("added_after", ())]
        if carry and out:
            out[-1] = out[-1] + carry
        return out


def batches(steps: list[dict]) -> list[StepBatch]:
    """vLLM's logged steps as schedules."""
    out = []
    for step in steps:
        seqs = {_rid(q["id"]): (int(q["new"]), int(q["computed"])) for q in step["seqs"]}
        waiting = {_rid(q["id"]): int(q["computed"]) for q in step["seqs"]
                   if q["from_waiting"]}
        out.append(StepBatch(seqs, waiting, frozenset(_rid(r) for r in step["preempted"])))
    return out


def _rid(text) -> int:
    """vLLM appends a random suffix to a request's id: ``"12-9f3a1c2e"`` is request 12."""
    return int(str(text).split("-", 1)[0])


def _check_ranges(settings: EngineSettings, requests: dict, where: str) -> None:
    """Settings and requests a served run can have: counts of at least one, known
    policies; anything else is not a run vLLM served."""
    for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks",
                 "max_model_len"):
        if getattr(settings, name) < 1:
            raise ServeLogError(f"{where}: engine.{name} is {getattr(settings, name)}; a "
                                "served run has at least 1")
    for name, known in (("policy", ("fcfs", "priority")),
                        ("kv_admission", ("on_demand", "whole_prompt", "guaranteed_no_evict"))):
        if getattr(settings, name) not in known:
            raise ServeLogError(f"{where}: engine.{name} is {getattr(settings, name)[:40]!r}; "
                                f"known: {', '.join(known)}")
    for req in requests.values():
        if max(req.prompt_tokens, req.output_tokens, req.prefix_tokens) > MAX_TOKENS:
            raise ServeLogError(f"{where}: request {req.id} has more than {MAX_TOKENS:,} "
                                "tokens; not a run vLLM served")
        if req.prompt_tokens < 1 or req.output_tokens < 1 or req.prefix_tokens < 0:
            raise ServeLogError(f"{where}: request {req.id} has {req.prompt_tokens} prompt "
                                f"tokens, max_tokens {req.output_tokens} and "
                                f"{req.prefix_tokens} prefix tokens; a served request has at "
                                "least 1 of each (prefix at least 0)")


# what one step of a served run can be: no engine step takes a minute, holds more tokens
# than any context, or happens past a run's length
MAX_STEP_S = 60.0
MAX_RUN_S = 10 * 365 * 86400.0
MAX_TOKENS = 10_000_000


def _check_steps(steps: list, arrival: dict, where: str) -> None:
    for i, step in enumerate(steps):
        start, end = step["start_s"], step["end_s"]
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end <= MAX_RUN_S
                and end - start <= MAX_STEP_S):
            raise ServeLogError(f"{where}: steps[{i}]: runs from {start:g} s to {end:g} s; a "
                                f"served step lies within the run and takes at most "
                                f"{MAX_STEP_S:g} s")
        for seq in step.get("seqs") or []:
            counts = [seq.get(k, 0) for k in ("new", "computed", "known", "prompt")]
            if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_TOKENS
                       for c in counts):
                raise ServeLogError(f"{where}: steps[{i}]: a sequence's token counts are not "
                                    f"whole numbers from 0 to {MAX_TOKENS:,}")
    for rid, t in arrival.items():
        if not (math.isfinite(t) and 0 <= t <= MAX_RUN_S):
            raise ServeLogError(f"{where}: request {rid} arrives at {t:g} s; not a served run")


def load(plan: dict, log: dict, where: str = "log") -> ServeLog:
    if log.get("format") != SERVE_FORMAT:
        raise ServeLogError(f"{where}: not a vLLM serve log (format {log.get('format')!r})")
    try:
        e = plan["engine"]
        settings = EngineSettings(
            max_num_batched_tokens=int(e["max_num_batched_tokens"]),
            max_num_seqs=int(e["max_num_seqs"]), block_size=int(e["block_size"]),
            num_blocks=int(e["num_blocks"]), chunked_prefill=bool(e["chunked_prefill"]),
            prefix_caching=bool(e["prefix_caching"]), policy=str(e["policy"]),
            max_model_len=int(e["max_model_len"]), kv_admission=str(e["kv_admission"]))
        requests = {int(r["id"]): PlanRequest(
            int(r["id"]), len(r["prompt"]) if "prompt" in r else int(r["prompt_tokens"]),
            int(r["max_tokens"]), int(r.get("priority", 0)), r.get("prefix_group"),
            int(r.get("prefix_tokens", 0))) for r in plan["requests"]}
        arrival = {int(r["id"]): float(r["arrival_s"]) for r in log["requests"]}
        steps = list(log["steps"])
        for s in steps:
            s["start_s"], s["end_s"] = float(s["start_s"]), float(s["end_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ServeLogError(f"{where}: missing or malformed field {exc}") from None
    _check_ranges(settings, requests, where)
    _check_steps(steps, arrival, where)
    return ServeLog(settings, requests, arrival, steps, list(log["requests"]),
                    dict(log.get("meta") or {}))


# a recorded run is a few MB; anything past this (a gzip bomb, a wrong file) is refused
MAX_RECORD_BYTES = 512 * 2**20


def read_json(path: Path) -> dict:
    """A JSON file, gzip-compressed when its name ends in .gz; at most
    MAX_RECORD_BYTES once decompressed (a ServeLogError beyond), only a regular file."""
    path = Path(path)
    try:
        with open_regular(path, max_bytes=MAX_RECORD_BYTES) as raw:
            if path.suffix == ".gz":
                with gzip.GzipFile(fileobj=raw) as fh:
                    data = fh.read(MAX_RECORD_BYTES + 1)
            else:
                data = raw.read(MAX_RECORD_BYTES + 1)
    except InputFileError as exc:
        raise ServeLogError(f"{path}: {exc.message}") from None
    except (OSError, EOFError) as exc:       # not gzip, truncated
        raise ServeLogError(f"{path}: cannot read ({type(exc).__name__})") from None
    if len(data) > MAX_RECORD_BYTES:
        raise ServeLogError(f"{path}: more than {MAX_RECORD_BYTES // 2**20} MiB of JSON; "
                            "not a recorded run")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ServeLogError(f"{path}: not UTF-8 text; not a recorded run") from None
    except RecursionError:
        raise ServeLogError(f"{path}: JSON nested too deeply; not a recorded run") from None
    except ValueError as exc:       # not JSON (its message quotes no content)
        raise ServeLogError(f"{path}: not JSON ({type(exc).__name__}); not a recorded "
                            "run") from None


def read(plan_path: Path, log_path: Path) -> ServeLog:
    return load(read_json(plan_path), read_json(log_path), str(log_path))


class _ForcedClock:
    """A cost model whose every step takes what vLLM's step at the same index took."""

    after_idle_s = 0.0

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds
        self.index = 0

    def step_scalar(self, *_):
        k = min(self.index, len(self.seconds) - 1)
        return (self.seconds[k] if self.seconds else 0.0), 0.0, 0.0


def replay(log: ServeLog) -> list[StepBatch]:
    """fleetsim's continuous scheduler on the log's arrivals, one step at a time."""

    s = log.settings
    clock = _ForcedClock([st["end_s"] - st["start_s"] for st in log.steps])
    sched = ContinuousScheduler(
        ContinuousConfig(max_num_batched_tokens=s.max_num_batched_tokens,
                         max_num_seqs=s.max_num_seqs, chunked_prefill=s.chunked_prefill,
                         policy=s.policy, kv_admission=s.kv_admission, exact_steps=True),
        kv=KvCacheManager(s.num_blocks, s.block_size, prefix_caching=s.prefix_caching),
        cost=clock, limits=ReplicaLimits(max_model_len=s.max_model_len),
        on_finish=lambda req: None)
    reqs: dict[int, Request] = {}
    for rid, p in log.requests.items():
        req = Request(rid, 0, "validation", "model", "engine", p.priority,
                      log.arrival_s.get(rid, 0.0), p.prompt_tokens, p.output_tokens)
        if p.prefix_group is not None:
            req.prefix_group = p.prefix_group
            req.prefix_tokens = p.prefix_tokens
        reqs[rid] = req
    out: list[StepBatch] = []
    added = log.added_before()
    k = 0
    now = 0.0
    while True:
        if k < len(log.steps):
            for rid in added[k]:
                sched.add(reqs[rid])
            now = log.steps[k]["start_s"]
        waiting = {id(r) for r in sched.waiting}
        preemptions = {rid: r.preemptions for rid, r in reqs.items()}
        decoders = list(sched.cohort.members.values())
        clock.index = k
        seg = sched.next_segment(now)
        if seg is None or isinstance(seg, float):
            if k >= len(log.steps):
                break
            out.append(StepBatch({}, {}, frozenset()))
            k += 1
            continue
        seqs: dict[int, tuple[int, int]] = {}
        from_waiting: dict[int, int] = {}
        members = sched.cohort.members
        for r in decoders:
            if r.seq in members and members[r.seq] is r:
                seqs[r.request_id] = (1, r.decode_base + sched.step)
        for r, n in seg.payload:
            seqs[r.request_id] = (n, r.num_computed_tokens)
            if id(r) in waiting:
                from_waiting[r.request_id] = r.num_computed_tokens
        preempted = frozenset(rid for rid, r in reqs.items()
                              if r.preemptions != preemptions[rid])
        out.append(StepBatch(seqs, from_waiting, preempted))
        end = now + seg.duration_s
        sched.finish_segment(seg, 1, now, end)
        sched.last_step_end_s = end
        now = end
        k += 1
        if k > 4 * len(log.steps) + 1000:
            break                              # fleetsim cannot finish what vLLM did
    return out


def preemptions(steps: list[StepBatch]) -> int:
    return sum(len(b.preempted) for b in steps)


def first_hits(steps: list[StepBatch]) -> int:
    """Prompt tokens served from the prefix cache at each request's first admission."""
    seen: set[int] = set()
    total = 0
    for b in steps:
        for rid, hit in b.from_waiting.items():
            if rid not in seen:
                seen.add(rid)
                total += hit
    return total


@dataclass
class Equivalence:
    steps: int                               # steps compared (the longer of the two runs)
    identical: int
    kinds: dict[str, int]                    # kind -> steps
    first: dict[str, dict]                   # kind -> the first such step, both sides

    @property
    def share(self) -> float:
        return self.identical / self.steps if self.steps else 1.0

    def to_json(self) -> dict:
        return {"steps": self.steps, "identical": self.identical,
                "share_identical": round(self.share, 6), "mismatches": self.kinds,
                "first_mismatch": self.first}


def compare(engine: list[StepBatch], ours: list[StepBatch]) -> Equivalence:
    kinds: dict[str, int] = {}
    first: dict[str, dict] = {}
    identical = 0
    n = max(len(engine), len(ours))
    for k in range(n):
        if k >= len(engine):
            kind = "extra_step"
        elif k >= len(ours):
            kind = "missing_step"
        else:
            kind = engine[k].kind_of_difference(ours[k])
        if kind is None:
            identical += 1
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind not in first:
            first[kind] = {"step": k,
                           "vllm": engine[k].brief() if k < len(engine) else None,
                           "fleetsim": ours[k].brief() if k < len(ours) else None}
    return Equivalence(n, identical, kinds, first)
