"""The prefix cache by block names: conversations sharing a system prompt, a turn
starting from its conversation's earlier turns, traced prompts naming their blocks."""
from __future__ import annotations

from simfactories import make_request
from sim.entities.block_keys import HashKeys, SessionKeys
from sim.entities.kv import KvCacheManager

BS = 16


def turn(request_id, prompt, output, conversation, system=("sys", 64)):
    req = make_request(request_id=request_id, prompt_tokens=prompt, max_output_tokens=output)
    req.prefix_group = conversation
    req.block_keys = SessionKeys(system[0], system[1], conversation, prompt + output)
    return req


def run_to_end(kv: KvCacheManager, req) -> None:
    """Admit ``req`` from its cache hit, compute its prompt, decode its answer, end it."""
    hit = kv.hit_blocks(req)
    admitted = kv.admit(req, hit, req.prompt_tokens - hit * BS)
    assert admitted is not None
    req.num_computed_tokens = admitted.cached_tokens
    req.cached_prompt_tokens = admitted.shared_prefix_tokens
    req.num_computed_tokens = req.prompt_tokens
    kv.register_prefix(req)
    req.num_output_tokens = 1
    while req.num_output_tokens < req.max_output_tokens:
        assert kv.allocate(req, 1)
        req.num_computed_tokens += 1
        req.num_output_tokens += 1
    kv.free(req)


def check_counts(kv: KvCacheManager, held: int = 0) -> None:
    assert kv.num_free_blocks + held == kv.num_blocks
    assert 0 <= kv.num_cached_blocks <= kv.num_free_blocks
    assert kv.num_cached_blocks == sum(key[-1] for key in kv._evictable) + sum(
        c.count(0) for c in kv._chains.values())


def test_a_later_turn_starts_from_its_conversations_earlier_prompt_and_answer():
    kv = KvCacheManager(num_blocks=200, block_size_tokens=BS, prefix_caching=True)
    first = turn(0, prompt=300, output=100, conversation="c~0")
    run_to_end(kv, first)
    assert first.cached_prompt_tokens == 0
    check_counts(kv)
    # the conversation so far (400 tokens: 25 full blocks, less the last token's) + 50 new
    second = turn(1, prompt=450, output=20, conversation="c~0")
    assert kv.hit_blocks(second) == (400 - 1) // BS == 24
    run_to_end(kv, second)
    assert second.cached_prompt_tokens == 24 * BS
    check_counts(kv)


def test_conversations_share_the_system_prompt_and_nothing_else():
    kv = KvCacheManager(num_blocks=200, block_size_tokens=BS, prefix_caching=True)
    run_to_end(kv, turn(0, prompt=300, output=50, conversation="c~0", system=("sys", 100)))
    other = turn(1, prompt=300, output=50, conversation="c~1", system=("sys", 100))
    assert kv.hit_blocks(other) == 100 // BS        # the system prompt's full blocks only
    stranger = turn(2, prompt=300, output=50, conversation="c~2", system=("other", 100))
    assert kv.hit_blocks(stranger) == 0
    without_caching = KvCacheManager(num_blocks=200, block_size_tokens=BS)
    run_to_end(without_caching, turn(3, prompt=300, output=50, conversation="c~3"))
    assert without_caching.hit_blocks(turn(4, 400, 5, "c~3")) == 0


def test_a_request_holding_cached_blocks_keeps_them_and_the_tail_is_evicted_first():
    kv = KvCacheManager(num_blocks=30, block_size_tokens=BS, prefix_caching=True)
    run_to_end(kv, turn(0, prompt=320, output=1, conversation="c~0", system=("s", 0)))
    assert kv.num_cached_blocks == 20 and kv.num_free_blocks == 30
    check_counts(kv)
    # a stranger needing 15 blocks evicts 5 cached ones: the conversation's last five
    stranger = make_request(request_id=9, prompt_tokens=240)
    assert kv.allocate(stranger, 240)
    check_counts(kv, held=15)
    later = turn(1, prompt=400, output=5, conversation="c~0", system=("s", 0))
    assert kv.hit_blocks(later) == 15
    hit = kv.hit_blocks(later)
    assert kv.admit(later, hit, 400 - hit * BS) is None     # 10 more blocks: no room
    check_counts(kv, held=15)
    kv.free(stranger)
    assert kv.admit(later, hit, 400 - hit * BS) is not None
    assert later.prefix_blocks == 15
    check_counts(kv, held=later.prefix_blocks + later.num_blocks)


def test_a_block_another_request_cached_meanwhile_stays_the_requests_own():
    kv = KvCacheManager(num_blocks=100, block_size_tokens=BS, prefix_caching=True)
    a = turn(0, prompt=160, output=5, conversation="c~0", system=("s", 160))
    b = turn(1, prompt=160, output=5, conversation="c~1", system=("s", 160))
    for req in (a, b):          # both admitted before either computed: no hit
        assert kv.admit(req, kv.hit_blocks(req), 160) is not None
    for req in (a, b):
        req.num_computed_tokens = 160
        kv.register_prefix(req)
    assert (a.prefix_blocks, a.num_blocks) == (10, 0)
    assert (b.prefix_blocks, b.num_blocks) == (0, 10)       # a cached them first
    kv.free(a)
    kv.free(b)
    check_counts(kv)
    assert kv.num_cached_blocks == 10


def test_traced_block_ids_share_exactly_the_common_blocks_at_the_pools_block_size():
    """A traced prompt's pool blocks are cached in runs, one per trace block (its id): a
    prompt hits the runs it shares from the start, whole, never its last token's block."""
    kv = KvCacheManager(num_blocks=400, block_size_tokens=BS, prefix_caching=True)

    def traced(request_id, ids, prompt):
        req = make_request(request_id=request_id, prompt_tokens=prompt, max_output_tokens=2)
        req.prefix_group = f"t@{ids[0]}"
        req.block_keys = HashKeys("t", ids, 512, prompt)
        return req

    run_to_end(kv, traced(0, (1, 2, 3), 1500))
    check_counts(kv)
    assert kv.hit_blocks(traced(1, (1, 2, 9), 1500)) == 1024 // BS    # two blocks alike
    assert kv.hit_blocks(traced(2, (1, 2, 3), 1500)) == 1500 // BS    # all it computed
    assert kv.hit_blocks(traced(3, (7, 2, 3), 1500)) == 0              # differs at once
    # a prompt of whole pool blocks must compute its last token: its last run is not hit
    run_to_end(kv, traced(4, (5, 6), 1024))
    assert kv.hit_blocks(traced(5, (5, 6), 1024)) == 512 // BS
    # a block straddling two trace blocks at another block size takes the later id
    keys = HashKeys("t", (1, 2), 512, 1024)
    assert keys.run(0, 384) == (("t", 1, 0, 1), 1)
    assert keys.run(1, 384) == (("t", 2, 1, 1), 2)
    # at 16 tokens a trace block is one run of 32 pool blocks; a partial one is shorter
    assert keys.run(0, 16) == (("t", 1, 0, 32), 32)
    assert HashKeys("t", (1, 2), 512, 1000).run(32, 16) == (("t", 2, 1, 30), 62)


def test_eviction_takes_a_traced_run_whole_and_keeps_the_counts():
    """Evicting one block of a cached run frees the whole run: the extra blocks become
    never-used free ones, and every count stays consistent."""
    kv = KvCacheManager(num_blocks=70, block_size_tokens=BS, prefix_caching=True)
    first = make_request(request_id=0, prompt_tokens=1024, max_output_tokens=2)
    first.prefix_group = "t@1"
    first.block_keys = HashKeys("t", (1, 2), 512, 1024)
    run_to_end(kv, first)
    assert kv.num_cached_blocks == 64 and kv.num_free_blocks == 70
    other = make_request(request_id=1, prompt_tokens=16 * 10, max_output_tokens=1)
    assert kv.allocate(other, 16 * 10)               # 6 never-used blocks, then 4 evicted
    check_counts(kv, held=10)
    assert kv.num_cached_blocks == 32                  # the tail run went, all 32 blocks
    assert kv.num_free_blocks == 60 and kv.hit_blocks(first) == 32
