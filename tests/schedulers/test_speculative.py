"""The speculative-decoding continuous scheduler, driven on its own: accepted
tokens per step, speed-up at low load and slowdown at high load against plain
continuous batching, KV accounting, token budget and determinism."""
from __future__ import annotations

import re

import numpy as np
import pytest
from pydantic import ValidationError

from simfactories import (hardware_spec, make_continuous_scheduler, make_cost_model,
                          make_pool, make_request, make_scenario, run_step)
from sim.config.specs import ModelSpec
from sim.config.resolve import resolve
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.entities.kv import KvCacheManager, blocks_for
from sim.schedulers.base import ReplicaLimits
from sim.core.fleet import draft_cost_model
from sim.schedulers.speculative import (SpeculativeConfig, SpeculativeScheduler,
                                        expected_tokens_per_step)

# A Llama-3.2-1B-shaped draft model (~1.2B parameters, ~2.5 GB in bf16).
DRAFT_1B = ModelSpec(name="draft-1b", num_layers=16, hidden_size=2048, num_heads=32,
                     num_kv_heads=8, head_dim=64, ffn_size=8192, vocab_size=128256)
TARGET = make_cost_model()                      # llama-3.1-8b on one H100-SXM
DRAFT = RooflineCostModel(DRAFT_1B, hardware_spec("H100-SXM"), 1, "bf16", "bf16",
                          RooflineConfig())
BIG_KV = 1 << 16                                # blocks: no preemption


def make_spec(*, num_blocks: int = BIG_KV, rng=None, draft_cost=DRAFT, on_finish=None,
              **cfg) -> SpeculativeScheduler:
    cfg.setdefault("acceptance_rate", 0.8)
    if cfg.get("proposer", "draft_model") == "draft_model":
        cfg.setdefault("draft_model", "draft-1b")
    else:
        draft_cost = None
    return SpeculativeScheduler(
        SpeculativeConfig(**cfg), kv=KvCacheManager(num_blocks, 16), cost=TARGET,
        limits=ReplicaLimits(max_model_len=1 << 20),
        on_finish=on_finish if on_finish is not None else (lambda req: None),
        rng=rng, draft_cost=draft_cost)


def requests(n: int, prompt: int, output: int) -> list:
    return [make_request(request_id=i, prompt_tokens=prompt, max_output_tokens=output)
            for i in range(n)]


def running(sched) -> list:
    """The running requests: decoding (admission order), then prefilling."""
    return sched.cohort.in_order() + sched.prefilling


def scheduled(seg) -> list[tuple]:
    """(request, new tokens, drafts) of each sequence in a step, decoders first;
    drafts is -1 for a prefill chunk."""
    prefill, verify = seg.payload
    return ([(v.req, v.num_new, v.drafts) for v in verify]
            + [(req, n, -1) for req, n in prefill])


def drive(sched, reqs, *, before=None, after=None) -> float:
    """Feed ``reqs`` at their arrival times and run every step to the end;
    ``before(sched, seg)`` / ``after(sched, seg)`` are called around each
    step's application. Returns the time the last step ends."""
    pending = sorted(reqs, key=lambda r: r.arrival_s)
    now = 0.0
    while True:
        while pending and pending[0].arrival_s <= now:
            sched.add(pending.pop(0))
        seg = sched.next_segment(now)
        if seg is None:
            if not pending:
                return now
            now = pending[0].arrival_s
            continue
        if before is not None:
            before(sched, seg)
        sched.finish_segment(seg, seg.num_steps, now, now + seg.duration_s)
        now += float(seg.step_end_s[-1])
        if after is not None:
            after(sched, seg)


def step_durations_alone(sched, req) -> list[float]:
    """Run ``req`` alone to its end (its prompt step, then its verify passes); each
    step's duration, in order."""
    steps: list[float] = []
    drive(sched, [req], before=lambda _sched, seg: steps.append(seg.duration_s))
    return steps


# -- configuration --------------------------------------------------------------------
def test_config_defaults_and_validation():
    """Defaults match the continuous scheduler's (8192 / 256 / chunked) with
    k = 4 drafts from a draft model; a draft model must be named for that
    proposer and only for it; α lies strictly in (0, 1); the token budget must
    cover max_num_seqs; unknown keys are errors."""
    cfg = SpeculativeConfig(draft_model="tiny-llama", acceptance_rate=0.7)
    assert (cfg.type, cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.chunked_prefill,
            cfg.num_speculative_tokens, cfg.proposer, cfg.ngram_cost_s) == \
        ("speculative", 8192, 256, True, 4, "draft_model", 0.0002)
    assert SpeculativeConfig(proposer="ngram", acceptance_rate=0.5,
                             ngram_cost_s="1ms").ngram_cost_s == pytest.approx(1e-3)
    bad = [dict(acceptance_rate=0.7),                                       # no draft model
           dict(proposer="ngram", draft_model="tiny-llama", acceptance_rate=0.7),
           dict(draft_model="tiny-llama", acceptance_rate=1.0),
           dict(draft_model="tiny-llama", acceptance_rate=0.0),
           dict(draft_model="tiny-llama"),                                  # α is required
           dict(draft_model="tiny-llama", acceptance_rate=0.7, num_speculative_tokens=0),
           dict(draft_model="tiny-llama", acceptance_rate=0.7, max_num_batched_tokens=64),
           dict(draft_model="tiny-llama", acceptance_rate=0.7, exact_steps=True)]
    for kwargs in bad:
        with pytest.raises(ValidationError):
            SpeculativeConfig(**kwargs)


def _resolved_draft_pool(scheduler: dict, models: dict | None = None):
    resolved, problems = resolve(make_scenario(
        pool=make_pool(scheduler={"type": "speculative", "acceptance_rate": 0.7,
                                  **scheduler}), models=models))
    return (resolved.pools["p"] if resolved else None), problems


def test_the_composition_root_builds_the_draft_cost_from_a_resolved_pool():
    """The draft model is found when the pool is resolved (shipped or inline), and its
    cost model is built by the composition root like every other: the pool's kind of
    cost model on its hardware and tp; an unknown name is a located problem naming the
    known models; the n-gram proposer needs none; and a draft-model scheduler refuses to
    start without one."""
    pool, problems = _resolved_draft_pool({"draft_model": "TINY-LLAMA"})
    assert not problems and pool.draft_model.name == "tiny-llama"
    draft = draft_cost_model(pool)
    assert isinstance(draft, RooflineCostModel) and draft.model.name == "tiny-llama"
    assert draft.tp == pool.cfg.tp and draft.cfg == pool.cfg.cost_model
    pool, problems = _resolved_draft_pool({"draft_model": "draft-1b"},
                                          models={"draft-1b": DRAFT_1B.model_dump()})
    inline = draft_cost_model(pool)
    assert not problems and inline.model == DRAFT_1B
    # a 1B-class draft step is far cheaper than a target step
    assert inline.step_scalar(1, 1, 0, 512)[0] < 0.5 * TARGET.step_scalar(1, 1, 0, 512)[0]
    _, problems = _resolved_draft_pool({"draft_model": "nope"})
    [(loc, message)] = problems
    assert loc == ("pools", "p", "scheduler", "draft_model")
    assert re.search("unknown draft model 'nope'.*tiny-llama", message)
    pool, problems = _resolved_draft_pool({"proposer": "ngram"})
    assert not problems and pool.draft_model is None and draft_cost_model(pool) is None
    with pytest.raises(ValueError, match="draft_cost"):
        make_spec(draft_cost=None)


# -- accepted tokens per step ------------------------------------------------------------
@pytest.mark.parametrize("alpha,k", [(0.7, 4), (0.5, 2)])
def test_mean_tokens_per_decode_step_follows_acceptance_rate(alpha, k):
    """Over more than 20,000 decoding sequence-steps the measured tokens gained per
    decode step per sequence is (1 − α^(k+1)) / (1 − α) within 2%, and the
    drafts accepted per draft scheduled (gain − 1 per step) is near what the
    geometric model gives."""
    sched = make_spec(proposer="ngram", acceptance_rate=alpha, num_speculative_tokens=k,
                      rng=np.random.default_rng(11))
    reqs = requests(32, 64, 2000)
    drive(sched, reqs)
    assert all(r.num_output_tokens == 2000 for r in reqs)
    assert sched.num_decode_seq_steps > 20_000
    measured = sched.num_accepted_tokens / sched.num_decode_seq_steps
    expected = expected_tokens_per_step(alpha, k)
    assert expected == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))
    assert measured == pytest.approx(expected, rel=0.02)
    # every output token but each request's first (sampled by its prefill)
    assert sched.num_accepted_tokens == 32 * (2000 - 1)
    accepted_drafts = sched.num_accepted_tokens - sched.num_decode_seq_steps
    assert accepted_drafts / sched.num_draft_tokens == pytest.approx(
        (expected - 1) / k, rel=0.03)


# -- speed-up and slowdown against plain continuous batching ---------------------------------
def test_low_load_speedup_over_continuous():
    """One request (512 prompt, 512 output) alone on an H100: with a 1B draft
    model, k = 4 and α = 0.8 it finishes more than 1.3x sooner than with plain
    continuous batching (the draft steps cost less than the target steps the
    ~3.4 tokens per step save); its first token is no sooner."""
    plain_req, spec_req = requests(1, 512, 512)[0], requests(1, 512, 512)[0]
    plain = make_continuous_scheduler(num_blocks=BIG_KV, cost=TARGET)
    drive(plain, [plain_req])
    spec = make_spec(acceptance_rate=0.8, num_speculative_tokens=4,
                     rng=np.random.default_rng(0))
    drive(spec, [spec_req])
    assert plain_req.num_output_tokens == spec_req.num_output_tokens == 512
    speedup = plain_req.finish_s / spec_req.finish_s
    assert 1.3 < speedup < 2.5, speedup
    assert spec_req.first_token_s >= plain_req.first_token_s


def test_high_load_slowdown_against_continuous():
    """256 sequences (512 prompt, 1,024 output) all running at once: the verify
    pass (5 tokens per sequence, each reading the sequence's KV) and the four
    draft steps make a step dearer than the ~3.4 tokens it gains per sequence pay
    for, so the time per generated token is worse than plain continuous batching.
    Only just: the 1,280-token verify pass runs its GEMMs nearer their top FLOP/s
    share (0.86·1280/(1280+130) of peak) than a 256-token plain step does
    (0.86·256/(256+130)), which leaves spec a few percent slower, not more."""
    plain_reqs, spec_reqs = requests(256, 512, 1024), requests(256, 512, 1024)
    plain = make_continuous_scheduler(num_blocks=BIG_KV, cost=TARGET)
    t_plain = drive(plain, plain_reqs)
    spec = make_spec(acceptance_rate=0.8, num_speculative_tokens=4,
                     rng=np.random.default_rng(0))
    t_spec = drive(spec, spec_reqs)
    tokens = 256 * 1024
    assert sum(r.num_output_tokens for r in plain_reqs) == tokens
    assert sum(r.num_output_tokens for r in spec_reqs) == tokens
    assert max(r.preemptions for r in spec_reqs) == 0
    slowdown = (t_spec / tokens) / (t_plain / tokens)
    assert 1.0 < slowdown < 1.1, slowdown


# -- KV accounting and the token budget ---------------------------------------------------------
@pytest.mark.parametrize("policy", [{}, {"policy": "priority"},
                                    {"long_prefill_token_threshold": 5},
                                    {"policy": "priority", "long_prefill_token_threshold": 5},
                                    {"prefill_only_steps": True},
                                    {"prefill_only_steps": True, "policy": "priority"}],
                         ids=["fcfs", "priority", "chunk-cap", "priority-chunk-cap",
                              "prefill-only", "prefill-only-priority"])
def test_kv_accounting_with_preemption_and_a_tight_budget(policy):
    """On a cache too small for the load (preemptions happen) and a 12-token
    budget (drafts get cut): during every step each scheduled sequence holds
    exactly the blocks for its computed plus scheduled tokens (the drafts'
    slots reserved) and the step's tokens fit the budget; after every step free
    + used == total, the running sequences hold all used blocks and exactly
    the blocks their computed tokens need (rejected slots released, which does
    happen), waiting ones hold none; every request ends with exactly its
    max_output_tokens."""
    rng = np.random.default_rng(5)
    reqs = []
    t = 0.0
    for i in range(40):
        t += float(rng.exponential(0.02))
        reqs.append(make_request(request_id=i, prompt_tokens=int(rng.integers(50, 400)),
                                 max_output_tokens=int(rng.integers(20, 400)), arrival_s=t,
                                 priority=int(rng.integers(0, 3))))
    finished = []
    sched = make_spec(num_blocks=60, acceptance_rate=0.6, num_speculative_tokens=4,
                      max_num_batched_tokens=12, max_num_seqs=8,
                      rng=np.random.default_rng(1), on_finish=finished.append, **policy)
    kv = sched.kv
    held_before: dict[int, int] = {}
    released = [0]
    cut_drafts = [0]

    def before(s, seg):
        items = scheduled(seg)
        assert seg.tokens[0] <= 12 and seg.num_seqs == len(items)
        for req, num_new, drafts in items:
            assert req.num_blocks == blocks_for(req.num_computed_tokens + num_new, 16)
            if drafts >= 0:
                assert num_new == 1 + drafts
                remaining = req.max_output_tokens - req.num_output_tokens
                cut_drafts[0] += drafts < min(4, remaining - 1)
        assert sum(r.num_blocks for r in running(s)) == kv.num_used_blocks
        held_before.clear()
        held_before.update({id(r): r.num_blocks for r in running(s)})

    def after(s, seg):
        assert kv.num_free_blocks + kv.num_used_blocks == kv.num_blocks
        assert 0 <= kv.num_free_blocks <= kv.num_blocks
        assert sum(r.num_blocks for r in running(s)) == kv.num_used_blocks
        for r in running(s):
            assert r.num_blocks == blocks_for(r.num_computed_tokens, 16)
            assert r.num_computed_tokens <= r.num_tokens
            released[0] += r.num_blocks < held_before.get(id(r), 0)
        assert all(r.num_blocks == 0 for r in s.waiting)

    drive(sched, reqs, before=before, after=after)
    assert len(finished) == 40
    assert all(r.num_output_tokens == r.max_output_tokens for r in reqs)
    assert all(r.finish_s >= r.first_token_s >= r.admitted_s >= r.arrival_s for r in reqs)
    assert kv.num_free_blocks == kv.num_blocks and not running(sched) and not sched.waiting
    assert sum(r.preemptions for r in reqs) > 0
    assert released[0] > 0 and cut_drafts[0] > 0


def test_prefix_cache_hits_with_speculation():
    """With prefix caching on, requests of a group start from its cached
    prefix blocks (their prompt tokens skip prefill); after every step each
    running sequence holds, own plus shared, exactly the blocks its computed
    tokens need, the shared blocks in use are no more than those referenced,
    and at the end every block is free again (cached ones count as free) and
    every request has exactly its max_output_tokens."""
    rng = np.random.default_rng(2)
    reqs = []
    for i in range(30):
        r = make_request(request_id=i, prompt_tokens=int(rng.integers(520, 900)),
                         max_output_tokens=int(rng.integers(10, 200)), arrival_s=0.05 * i)
        r.prefix_group, r.prefix_tokens = f"g{i % 2}", 512
        reqs.append(r)
    sched = make_spec(acceptance_rate=0.7, rng=np.random.default_rng(3))
    sched.kv = KvCacheManager(200, 16, prefix_caching=True)
    kv = sched.kv

    def after(s, seg):
        own = 0
        for r in running(s):
            assert r.num_blocks + r.prefix_blocks == blocks_for(r.num_computed_tokens, 16)
            own += r.num_blocks
        shared = kv.num_used_blocks - own
        assert 0 <= shared <= sum(r.prefix_blocks for r in running(s))
        assert all(r.num_blocks == 0 and r.prefix_blocks == 0 for r in s.waiting)

    drive(sched, reqs, after=after)
    assert all(r.num_output_tokens == r.max_output_tokens for r in reqs)
    hits = [r.cached_prompt_tokens for r in reqs]
    assert hits[0] == hits[1] == 0 and sum(h > 0 for h in hits) >= 20
    assert all(h % 16 == 0 and h <= 512 for h in hits)
    assert kv.num_free_blocks == kv.num_blocks


def test_drafts_cut_by_budget_and_by_remaining_output():
    """A decoding sequence schedules 1 + k tokens, fewer drafts when the
    remaining budget is smaller (the next one may get none) and never more than
    the output tokens it still needs; a step's tokens count the drafts."""
    sched = make_spec(max_num_batched_tokens=6, max_num_seqs=2, num_speculative_tokens=4,
                      rng=np.random.default_rng(0))
    a = make_request(request_id=0, prompt_tokens=2, max_output_tokens=100)
    b = make_request(request_id=1, prompt_tokens=2, max_output_tokens=100)
    sched.add(a)
    sched.add(b)
    seg = sched.next_segment(0.0)                    # both prompts in one step
    assert seg.tokens[0] == 4 and seg.num_seqs == 2
    sched.finish_segment(seg, 1, 0.0, seg.duration_s)
    seg = sched.next_segment(1.0)
    assert [(n, drafts) for _, n, drafts in scheduled(seg)] == [(5, 4), (1, 0)]
    assert seg.tokens[0] == 6

    short = make_spec(num_speculative_tokens=4, rng=np.random.default_rng(0))
    req = make_request(prompt_tokens=10, max_output_tokens=3)
    short.add(req)
    seg = short.next_segment(0.0)
    short.finish_segment(seg, 1, 0.0, seg.duration_s)   # prefill samples token 1 of 3
    seg = short.next_segment(1.0)
    assert seg.tokens[0] == 2                         # the last token + 1 draft
    assert req.num_blocks == blocks_for(10 + 1 + 2, 16)


def test_ngram_proposer_adds_a_fixed_cpu_cost():
    """With the n-gram proposer a decode step costs the target's verify pass
    (k + 1 tokens, k + 1 logit rows, the context's KV read once, the draft
    positions' attention like a k-token chunk) plus ngram_cost_s, and
    nothing for a draft model."""
    sched = make_spec(proposer="ngram", acceptance_rate=0.5, num_speculative_tokens=3,
                      ngram_cost_s="1ms")
    req = make_request(prompt_tokens=100, max_output_tokens=50)
    sched.add(req)
    run_step(sched, 0.0)
    seg = sched.next_segment(1.0)
    target = TARGET.step_scalar(4.0, 4.0, 3.0 * (101 + 1.5), 101.0)[0]
    assert float(seg.step_end_s[0]) == pytest.approx(target + 1e-3)


def test_draft_model_cost_is_sequential_draft_steps():
    """With a draft model a decode step costs the target's verify pass plus k
    sequential draft decode steps, the i-th reading context + 1 + i tokens."""
    sched = make_spec(acceptance_rate=0.5, num_speculative_tokens=3)
    req = make_request(prompt_tokens=100, max_output_tokens=50)
    sched.add(req)
    run_step(sched, 0.0)
    seg = sched.next_segment(1.0)
    expected = TARGET.step_scalar(4.0, 4.0, 3.0 * (101 + 1.5), 101.0)[0] + sum(
        DRAFT.step_scalar(1.0, 1.0, 0.0, 101.0 + i)[0] for i in range(3))
    assert float(seg.step_end_s[0]) == pytest.approx(expected)


def test_a_step_with_a_prompt_chunk_runs_the_draft_model_over_the_chunk_only():
    """Beside a drafting decoder, a prompt chunk costs the draft model a prefill of that
    chunk (its own attention work), not of the verify pass's draft positions too."""
    sched = make_spec(acceptance_rate=0.5, num_speculative_tokens=3)
    first = make_request(request_id=0, prompt_tokens=100, max_output_tokens=50)
    sched.add(first)
    run_step(sched, 0.0)
    second = make_request(request_id=1, prompt_tokens=64, max_output_tokens=5)
    sched.add(second)
    seg = sched.next_segment(1.0)
    assert [(r.request_id, n, d) for r, n, d in scheduled(seg)] == [(0, 4, 3), (1, 64, -1)]
    verify_work, chunk_work = 3.0 * (101 + 1.5), 64.0 * 32.0
    expected = (TARGET.step_scalar(68.0, 5.0, verify_work + chunk_work, 101.0)[0]
                + DRAFT.step_scalar(64.0, 1.0, chunk_work, 0.0)[0]
                + sum(DRAFT.step_scalar(1.0, 1.0, 0.0, 101.0 + i)[0] for i in range(3)))
    assert float(seg.step_end_s[0]) == pytest.approx(expected, rel=1e-12)


def test_longest_gap_between_tokens_is_recorded():
    """Each request records its longest gap between two output tokens (tokens accepted
    in one step come together): with one request alone every step after its prompt is a
    verify pass, so the gap is the longest of those steps."""
    sched = make_spec(acceptance_rate=0.5, num_speculative_tokens=3)
    req = make_request(prompt_tokens=100, max_output_tokens=40)
    steps = step_durations_alone(sched, req)
    assert req.done and req.max_itl_s == pytest.approx(max(steps[1:]), rel=1e-12)
    assert req.max_itl_s > 0


# -- determinism ----------------------------------------------------------------------------------
def test_deterministic_for_a_fixed_seed():
    """The same rng seed gives the same per-request times and counters; another
    seed gives other draws (different step counts)."""
    def run(seed):
        reqs = [make_request(request_id=i, prompt_tokens=100 + 37 * i,
                             max_output_tokens=60 + 11 * i, arrival_s=0.01 * i)
                for i in range(20)]
        sched = make_spec(num_blocks=100, acceptance_rate=0.7,
                          rng=np.random.default_rng(seed))
        end = drive(sched, reqs)
        return (end, [(r.first_token_s, r.finish_s, r.preemptions) for r in reqs],
                sched.num_steps, sched.num_accepted_tokens, sched.num_decode_seq_steps)

    first = run(42)
    assert run(42) == first
    assert run(43) != first
    # no rng given: a fixed default seed
    a, b = make_spec(), make_spec()
    assert a.rng.random() == b.rng.random()


# -- the continuous step's policies, which speculation now shares ----------------------

def test_priority_policy_orders_admission_and_picks_the_victim():
    """policy: priority, as in the continuous scheduler: the waiting request of the
    smallest priority is admitted first whatever its arrival, and when the cache runs
    out the running request of the largest priority is preempted (by recompute), not
    the one admitted last."""
    sched = make_spec(num_blocks=12, policy="priority", max_num_batched_tokens=256,
                      max_num_seqs=8, num_speculative_tokens=2, acceptance_rate=0.5,
                      rng=np.random.default_rng(0))
    low = make_request(request_id=0, prompt_tokens=32, max_output_tokens=100, priority=5)
    sched.add(low)
    run_step(sched, 0.0)                       # low alone: admitted, prefilled
    high = make_request(request_id=1, prompt_tokens=32, max_output_tokens=100, priority=0)
    mid = make_request(request_id=2, prompt_tokens=32, max_output_tokens=100, priority=1)
    sched.add(mid)
    sched.add(high)
    seg = run_step(sched, 1.0)
    assert [req.request_id for req, _, _ in scheduled(seg)] == [0, 1, 2]
    assert high.seq < mid.seq                  # admitted in priority order
    now = 2.0
    while not low.preemptions:                 # 12 blocks of 16 run out as they decode
        assert not high.preemptions and not mid.preemptions
        now += run_step(sched, now).duration_s
    assert low.preemptions == 1 and not high.preemptions and not mid.preemptions
    # low came first in admission order and preempted itself before anyone was
    # scheduled: the step was empty, and scheduling went on at once (no stall)
    while not (high.done and mid.done):
        seg = run_step(sched, now)
        assert seg is not None, "a running request was left unscheduled"
        now += seg.duration_s


def test_long_prefill_token_threshold_caps_chunks():
    """long_prefill_token_threshold caps one request's prefill chunk per step, so a
    decoder's verify pass keeps its place beside a long prompt."""
    sched = make_spec(long_prefill_token_threshold=100, max_num_batched_tokens=512,
                      rng=np.random.default_rng(0))
    short = make_request(request_id=0, prompt_tokens=20, max_output_tokens=50)
    sched.add(short)
    run_step(sched, 0.0)
    long = make_request(request_id=1, prompt_tokens=1000, max_output_tokens=5)
    sched.add(long)
    chunks = []
    now = 1.0
    while long.first_token_s != long.first_token_s:          # until its prompt is done
        seg = run_step(sched, now)
        now += seg.duration_s
        chunks += [n for req, n, drafts in scheduled(seg) if req is long]
        assert any(req is short for req, _, _ in scheduled(seg)) or short.done
    assert chunks == [100] * 10


def test_verify_passes_go_in_admission_order_when_prompts_finish_out_of_it():
    """A long prompt admitted first but capped per step finishes after a short one
    admitted beside it; their verify passes still go in admission order, as vLLM's
    running list keeps them (the earlier one drafts first when the budget is short)."""
    sched = make_spec(long_prefill_token_threshold=100, max_num_batched_tokens=512,
                      rng=np.random.default_rng(0))
    long = make_request(request_id=0, prompt_tokens=400, max_output_tokens=50)
    short = make_request(request_id=1, prompt_tokens=30, max_output_tokens=50)
    sched.add(long)
    sched.add(short)
    seg = run_step(sched, 0.0)
    assert [(r.request_id, n) for r, n, _ in scheduled(seg)] == [(0, 100), (1, 30)]
    now = seg.duration_s
    while long.first_token_s != long.first_token_s:
        now += run_step(sched, now).duration_s
    assert short.num_output_tokens > long.num_output_tokens      # short joined first
    seg = run_step(sched, now)
    assert [(r.request_id, d >= 0) for r, _, d in scheduled(seg)] == [(0, True), (1, True)]


def test_whole_prompt_admission_gate():
    """kv_admission: whole_prompt admits a waiting request only when the free blocks
    hold its whole prompt; on_demand admits its first chunk."""
    def first_steps(gate):
        sched = make_spec(num_blocks=20, kv_admission=gate, max_num_batched_tokens=64,
                          max_num_seqs=4, rng=np.random.default_rng(0))
        a = make_request(request_id=0, prompt_tokens=200, max_output_tokens=400)
        sched.add(a)
        for t in range(4):                     # a's prompt, 13 blocks
            run_step(sched, float(t))
        b = make_request(request_id=1, prompt_tokens=200, max_output_tokens=5)
        sched.add(b)
        seg = run_step(sched, 10.0)
        return [req.request_id for req, _, _ in scheduled(seg)]
    assert first_steps("on_demand") == [0, 1]
    assert first_steps("whole_prompt") == [0]


def test_pooled_itl_counts_a_verify_pass_as_one_gap_however_many_tokens_it_brings():
    """vLLM's ``bench serve`` appends one ITL gap per streamed chunk, and a verify pass's
    accepted tokens stream as one: one request alone has one gap per step after its
    prompt (its verify passes), fewer than its output tokens − 1, each that step."""
    sched = make_spec(acceptance_rate=0.8, num_speculative_tokens=3)
    req = make_request(prompt_tokens=100, max_output_tokens=60)
    steps = step_durations_alone(sched, req)
    assert req.done
    verify_steps_s = np.array(steps[1:])
    assert sched.gaps.num_gaps == len(verify_steps_s) < req.max_output_tokens - 1
    assert sched.gaps.sum_s == pytest.approx(verify_steps_s.sum(), rel=1e-12)
    assert sched.gaps.percentile(50) == pytest.approx(np.percentile(verify_steps_s, 50),
                                                      rel=0.005)


def test_estimated_output_admission_counts_speculative_decoders_output():
    """SGLang's admission under speculative decoding: the decoders' output (each its own
    count) enters the reserve; a tight cache then runs every request without preemption."""
    import numpy as np
    sched = make_spec(num_blocks=64, rng=np.random.default_rng(1), max_num_seqs=64,
                      kv_admission="estimated_output", max_new_tokens=256)
    reqs = requests(12, 100, 200)
    for r in reqs:
        sched.add(r)
    for _ in range(5_000):
        seg = sched.next_segment(0.0)
        if seg is None:
            break
        sched.finish_segment(seg, seg.num_steps, 0.0, seg.duration_s)
    assert all(r.done for r in reqs)
    assert sum(r.preemptions for r in reqs) == 0
    assert sched.cohort.output_tokens_at(sched.step) == 0      # nobody left decoding
