"""KV memory: how many blocks a replica gets (kv_budget) and the paged block
accounting of KvCacheManager."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfactories import (GIB, KV_HEAVY_BYTES_PER_TOKEN, KV_HEAVY_NAME, hardware_spec,
                          make_pool, make_request, make_scenario, model_spec, run_scenario)
from sim.config.resolve import resolve
from sim.cost.memory import kv_budget
from sim.entities.kv import KvCacheManager, blocks_for


def budget(*, model=KV_HEAVY_NAME, hardware="H100-SXM", tp=1, weight_dtype="bf16",
           kv_dtype="bf16", block_size_tokens=16, gpu_memory_utilization=0.9,
           activation_reserve_bytes=2e9, kv_cache_bytes=None):
    return kv_budget(model_spec(model), hardware_spec(hardware), tp=tp,
                     weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                     block_size_tokens=block_size_tokens,
                     gpu_memory_utilization=gpu_memory_utilization,
                     activation_reserve_bytes=activation_reserve_bytes,
                     kv_cache_bytes=kv_cache_bytes)


# -- kv_budget ------------------------------------------------------------------
def test_theory_kv_bytes_per_token_of_the_worked_example():
    """2 (K, V) · 64 layers · 16 KV heads · 128 head dim · 2 bytes = 0.5 MiB."""
    assert model_spec(KV_HEAVY_NAME).kv_bytes_per_token("bf16") == KV_HEAVY_BYTES_PER_TOKEN
    assert KV_HEAVY_BYTES_PER_TOKEN == 524_288


def test_theory_twenty_gib_of_kv_hold_40960_tokens():
    """20 GiB of KV at 0.5 MiB per token is 2,560 blocks of 16 tokens = 40,960 tokens."""
    b = budget(kv_cache_bytes=20 * GIB)
    assert b.num_blocks == 2560
    assert b.capacity_tokens == 40_960
    assert b.kv_bytes_per_gpu == 20 * GIB


def test_theory_fp8_kv_doubles_the_tokens_held():
    """fp8 KV takes one byte per element, so the same 20 GiB holds twice the tokens."""
    bf16 = budget(kv_cache_bytes=20 * GIB, kv_dtype="bf16")
    fp8 = budget(kv_cache_bytes=20 * GIB, kv_dtype="fp8")
    assert fp8.capacity_tokens == 2 * bf16.capacity_tokens == 81_920


@pytest.mark.parametrize("model,hardware,tp,weight_dtype", [
    ("llama-3.1-8b", "H100-SXM", 1, "bf16"),
    ("llama-3.1-8b", "H100-SXM", 1, "fp8"),
    ("llama-3.1-70b", "H100-SXM", 4, "bf16"),
    ("llama-3.1-70b", "H100-SXM", 8, "bf16"),
    ("llama-3.1-70b", "H200", 2, "fp8"),
    ("mixtral-8x7b", "H200", 1, "bf16"),
])
def test_theory_blocks_from_memory_left_after_weights(model, hardware, tp, weight_dtype):
    """Blocks = floor((reported memory·utilisation − weights/tp − reserve) / (block·kv/tp))."""
    m, hw = model_spec(model), hardware_spec(hardware)
    free = hw.reported_memory * 0.9 - m.weight_bytes(weight_dtype) / tp - 2e9
    expected = int(free // (16 * m.kv_bytes_per_token("bf16") / tp))
    got = budget(model=model, hardware=hardware, tp=tp, weight_dtype=weight_dtype)
    assert got.num_blocks == expected > 0


def test_model_that_does_not_fit_gets_no_blocks():
    """70B in bf16 (131.4 GiB) leaves no KV room on one 80 GiB H100; on two it leaves
    71.2 − 65.7 − 1.86 = 3.6 GiB per GPU (vLLM serves it so, with a small cache); a
    requested kv_cache_bytes larger than what is left is refused."""
    assert budget(model="llama-3.1-70b", tp=1).num_blocks <= 0
    assert 0 < budget(model="llama-3.1-70b", tp=2).num_blocks < 1_600
    assert budget(model="llama-3.1-70b", tp=4).num_blocks > 0
    assert budget(model="llama-3.1-8b", kv_cache_bytes=70 * GIB).num_blocks <= 0


def test_resolved_pool_carries_the_requested_kv_cache_size():
    """A pool with ``kv_cache_bytes: 20GiB`` on the 0.5 MiB/token model resolves
    to 2,560 blocks per replica, as the summary reports."""
    scenario = make_scenario(pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes="20GiB"))
    resolved, problems = resolve(scenario)
    assert not problems
    assert resolved.pools["p"].kv.num_blocks == 2560
    results = run_scenario(pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes="20GiB"),
                           duration=2.0)
    assert results.summary["pools"]["p"]["kv_blocks_per_replica"] == 2560


# -- KvCacheManager -------------------------------------------------------------
def test_allocate_takes_whole_blocks_as_tokens_are_computed():
    """Blocks are taken only when computed tokens cross a block boundary."""
    kv = KvCacheManager(num_blocks=10, block_size_tokens=16)
    req = make_request(prompt_tokens=20)
    assert kv.allocate(req, 20)
    assert (req.num_blocks, kv.num_used_blocks, kv.num_free_blocks) == (2, 2, 8)
    req.num_computed_tokens = 20
    assert kv.blocks_needed(req, 12) == 0      # 32 tokens still fit in 2 blocks
    assert kv.allocate(req, 12) and req.num_blocks == 2
    req.num_computed_tokens = 32
    assert kv.blocks_needed(req, 1) == 1
    assert kv.allocate(req, 1) and req.num_blocks == 3
    assert kv.usage == pytest.approx(0.3)


def test_free_returns_every_block_of_the_request():
    """Freeing a request gives back all its blocks and leaves it holding none."""
    kv = KvCacheManager(num_blocks=10, block_size_tokens=16)
    a, b = make_request(request_id=0), make_request(request_id=1)
    assert kv.allocate(a, 50) and kv.allocate(b, 16)
    assert kv.num_used_blocks == 5
    kv.free(a)
    assert a.num_blocks == 0 and kv.num_used_blocks == 1 and kv.num_free_blocks == 9
    kv.free(b)
    assert kv.num_free_blocks == 10 and kv.usage == 0.0


def test_failed_allocation_returns_false_and_changes_nothing():
    """"Doesn't fit" is a False return with neither the cache nor the request changed."""
    kv = KvCacheManager(num_blocks=4, block_size_tokens=16)
    a, b = make_request(request_id=0), make_request(request_id=1)
    assert kv.allocate(a, 48)
    before = (kv.num_free_blocks, b.num_blocks, b.num_computed_tokens)
    assert kv.allocate(b, 17) is False
    assert (kv.num_free_blocks, b.num_blocks, b.num_computed_tokens) == before
    assert kv.allocate(b, 16) is True and kv.num_free_blocks == 0


@pytest.mark.parametrize("num_blocks,block_size", [(1, 16), (10, 16), (2560, 16), (7, 1)])
def test_fits_ever_is_exactly_the_capacity(num_blocks, block_size):
    """A sequence fits an empty cache iff it needs at most num_blocks blocks."""
    kv = KvCacheManager(num_blocks=num_blocks, block_size_tokens=block_size)
    capacity = num_blocks * block_size
    assert kv.fits_ever(capacity)
    assert kv.fits_ever(1)
    assert not kv.fits_ever(capacity + 1)


def test_empty_cache_reports_zero_usage():
    """A cache with no blocks reports 0 usage instead of dividing by zero."""
    assert KvCacheManager(num_blocks=0, block_size_tokens=16).usage == 0.0


_ops = st.lists(st.tuples(st.sampled_from(["allocate", "free"]), st.integers(0, 5),
                          st.integers(0, 200)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, num_blocks=st.integers(0, 40), block_size=st.sampled_from([1, 4, 16]))
def test_block_accounting_is_conserved(ops, num_blocks, block_size):
    """Over any sequence of allocations (advancing computed tokens as the
    scheduler does) and frees (resetting them, as preemption does):
    free + used == total, used == Σ blocks held, each request holds exactly
    ceil(computed / block_size) blocks, and a failed allocation changes nothing."""
    kv = KvCacheManager(num_blocks=num_blocks, block_size_tokens=block_size)
    reqs = [make_request(request_id=i) for i in range(6)]
    for op, i, n in ops:
        req = reqs[i]
        if op == "allocate":
            state = (kv.num_free_blocks, req.num_blocks)
            need = blocks_for(req.num_computed_tokens + n, block_size) - req.num_blocks
            ok = kv.allocate(req, n)
            assert ok == (need <= state[0])
            if ok:
                req.num_computed_tokens += n
            else:
                assert (kv.num_free_blocks, req.num_blocks) == state
        else:
            kv.free(req)
            req.num_computed_tokens = 0
        assert 0 <= kv.num_free_blocks <= kv.num_blocks
        assert kv.num_free_blocks + kv.num_used_blocks == kv.num_blocks
        assert kv.num_used_blocks == sum(r.num_blocks for r in reqs)
        for r in reqs:
            assert r.num_blocks == blocks_for(r.num_computed_tokens, block_size)
