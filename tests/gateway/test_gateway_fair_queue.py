"""The gateway's per-pool waiting queue: strict priority, weighted fair
sharing between teams, FIFO mode, shedding and removal."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.gateway import FairQueue


class Item:
    """A queued request stand-in (identity semantics, like sim.entities.request.Request)."""

    def __init__(self, name: str, team: str, priority: int = 0, cost: float = 1.0) -> None:
        self.name, self.team, self.priority, self.cost = name, team, priority, cost

    def __repr__(self) -> str:
        return self.name


class Feeder:
    """Pushes items with increasing seq numbers."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.seq = 0

    def push(self, name: str, team: str, priority: int = 0, cost: float = 1.0) -> tuple[Item, list]:
        item = Item(name, team, priority, cost)
        shed = self.queue.push(item, team=team, priority=priority, cost=cost, seq=self.seq)
        self.seq += 1
        return item, shed


def drain(queue: FairQueue) -> list:
    out = []
    while (item := queue.pop()) is not None:
        out.append(item)
    return out


def test_weighted_share_two_to_one():
    """Weights a:2, b:1, equal costs, both backlogged: a, a, b, a, a, b, ..."""
    q = FairQueue(capacity=None, weights={"a": 2.0, "b": 1.0})
    f = Feeder(q)
    for i in range(6):
        f.push(f"a{i}", "a")
    for i in range(3):
        f.push(f"b{i}", "b")
    assert [it.team for it in drain(q)] == list("aabaabaab")


def test_weighted_share_with_interleaved_arrivals():
    """Pushed alternately, a (weight 2) still gets exactly 2 of every 3 pops."""
    q = FairQueue(capacity=None, weights={"a": 2.0, "b": 1.0})
    f = Feeder(q)
    for i in range(30):
        f.push(f"a{i}", "a")
        f.push(f"b{i}", "b")
    teams = [it.team for it in drain(q)][:45]     # while both are backlogged
    for k in range(1, 16):
        assert teams[:3 * k].count("a") == 2 * k


def test_cost_weighted_share():
    """Equal weights, a's items cost 3 and b's cost 1: b gets three items per a item."""
    q = FairQueue(capacity=None)
    f = Feeder(q)
    for i in range(10):
        f.push(f"a{i}", "a", cost=3.0)
    for i in range(30):
        f.push(f"b{i}", "b", cost=1.0)
    teams = [it.team for it in drain(q)]
    assert teams[:12].count("a") == 3
    assert teams[:12] == list("bbabbbabbbab")


def test_flooding_team_cannot_starve_another():
    """1000 items from one team then 10 from another, equal weights: the 10
    come out within the first 20 pops (alternating with the flood)."""
    q = FairQueue(capacity=None)
    f = Feeder(q)
    for i in range(1000):
        f.push(f"flood{i}", "flood")
    for i in range(10):
        f.push(f"small{i}", "small")
    first = [q.pop() for _ in range(20)]
    assert [it.team for it in first] == ["flood", "small"] * 10
    assert [it.name for it in first if it.team == "small"] == [f"small{i}" for i in range(10)]


def test_late_team_is_served_at_once():
    """A team arriving after another has had the queue to itself does not wait
    behind the backlog: it joins at the current virtual time."""
    q = FairQueue(capacity=None)
    f = Feeder(q)
    for i in range(100):
        f.push(f"a{i}", "a")
    for _ in range(50):
        q.pop()
    for i in range(5):
        f.push(f"b{i}", "b")
    assert sum(q.pop().team == "b" for _ in range(10)) == 5


def test_returning_team_does_not_jump_ahead():
    """A team that keeps one item queued (pushing the next as soon as one is
    served) gets its fair share, not everything."""
    q = FairQueue(capacity=None)
    f = Feeder(q)
    for i in range(50):
        f.push(f"b{i}", "b")
    f.push("a0", "a")
    served = []
    for i in range(1, 21):
        item = q.pop()
        served.append(item.team)
        if item.team == "a":
            f.push(f"a{i}", "a")
    assert served.count("a") == 10


def test_strict_priority_between_levels():
    """Lower priority value is served first, whatever the teams' weights or
    the arrival order; within a level the fair order applies."""
    q = FairQueue(capacity=None, weights={"big": 100.0})
    f = Feeder(q)
    f.push("big-low", "big", priority=5)
    f.push("small-low", "small", priority=5)
    f.push("small-urgent", "small", priority=0)
    f.push("big-mid", "big", priority=1)
    assert [it.name for it in drain(q)] == ["small-urgent", "big-mid", "big-low", "small-low"]


def test_fifo_when_fair_is_off():
    """fair=False: strict priority, then FIFO by seq, regardless of team."""
    q = FairQueue(capacity=None, fair=False)
    f = Feeder(q)
    for i in range(5):
        f.push(f"flood{i}", "flood")
    f.push("small0", "small")
    f.push("urgent", "small", priority=-1)
    names = [it.name for it in drain(q)]
    assert names == ["urgent", "flood0", "flood1", "flood2", "flood3", "flood4", "small0"]
    q2 = FairQueue(capacity=None, fair=False)
    for s in (5, 3, 4):
        q2.push(s, team="t", priority=0, cost=1.0, seq=s)
    assert drain(q2) == [3, 4, 5]


def test_shedding_lowest_priority_then_newest():
    """Capacity 3: an overflow sheds the largest priority value, newest first,
    which may be the item being pushed."""
    q = FairQueue(capacity=3)
    f = Feeder(q)
    s0, shed = f.push("s0", "a", priority=1)
    assert shed == []
    s1, _ = f.push("s1", "a", priority=2)
    s2, _ = f.push("s2", "b", priority=2)
    s3, shed = f.push("s3", "a", priority=1)
    assert shed == [s2]                                  # lowest priority, newest
    s4, shed = f.push("s4", "b", priority=2)
    assert shed == [s4]                                  # the incoming item itself
    s5, shed = f.push("s5", "b", priority=3)
    assert shed == [s5]
    s6, shed = f.push("s6", "b", priority=0)
    assert shed == [s1]
    s7, shed = f.push("s7", "b", priority=1)
    assert shed == [s7]
    assert len(q) == 3 and set(map(id, q)) == {id(s0), id(s3), id(s6)}
    assert drain(q) == [s6, s0, s3]


def test_zero_capacity_sheds_every_push():
    """Capacity 0 holds nothing: every push comes straight back as shed."""
    q = FairQueue(capacity=0)
    item = Item("x", "a")
    assert q.push(item, team="a", priority=0, cost=1.0, seq=0) == [item]
    assert len(q) == 0 and q.pop() is None and q.peek() is None


def test_remove_and_bookkeeping():
    """remove() takes an item out (True once, then False); lengths, peek,
    membership and iteration follow."""
    q = FairQueue(capacity=10)
    f = Feeder(q)
    a0, _ = f.push("a0", "a")
    a1, _ = f.push("a1", "a")
    b0, _ = f.push("b0", "b")
    assert len(q) == 3 and q.len_team("a") == 2 and q.len_team("b") == 1
    assert q.len_team("nobody") == 0
    assert a1 in q and sorted(it.name for it in q) == ["a0", "a1", "b0"]
    assert q.remove(a1) is True
    assert q.remove(a1) is False
    assert q.remove(Item("stranger", "a")) is False
    assert len(q) == 2 and q.len_team("a") == 1 and a1 not in q
    assert q.peek() is a0 and len(q) == 2
    assert drain(q) == [a0, b0]
    assert q.pop() is None and len(q) == 0


def test_removed_head_costs_its_team_nothing():
    """Removing a team's expensive head before service does not push back the
    team's next item: it is tagged afresh."""
    q = FairQueue(capacity=None)
    f = Feeder(q)
    big, _ = f.push("a-big", "a", cost=100.0)
    f.push("a-small", "a", cost=1.0)
    for i in range(3):
        f.push(f"b{i}", "b", cost=1.0)
    assert q.remove(big)
    assert [it.name for it in drain(q)][:2] == ["a-small", "b0"]


def test_duplicate_push_and_bad_arguments():
    """Pushing an item already queued, a negative cost or a bad weight is an error."""
    q = FairQueue(capacity=None)
    item = Item("x", "a")
    q.push(item, team="a", priority=0, cost=1.0, seq=0)
    with pytest.raises(ValueError):
        q.push(item, team="a", priority=0, cost=1.0, seq=1)
    with pytest.raises(ValueError):
        q.push(Item("y", "a"), team="a", priority=0, cost=-1.0, seq=2)
    with pytest.raises(ValueError):
        FairQueue(capacity=None, weights={"a": 0.0})
    with pytest.raises(ValueError):
        FairQueue(capacity=-1)


def test_unhashable_items_are_tracked_by_identity():
    """Items need not be hashable; equal-but-distinct items are distinct entries."""
    q = FairQueue(capacity=None)
    x, y = [1], [1]
    q.push(x, team="a", priority=0, cost=1.0, seq=0)
    q.push(y, team="a", priority=0, cost=1.0, seq=1)
    assert q.remove(y) and q.pop() is x and q.pop() is None


@settings(max_examples=300, deadline=None)
@given(capacity=st.one_of(st.none(), st.integers(0, 8)), fair=st.booleans(),
       ops=st.lists(st.tuples(st.sampled_from(["push", "push", "pop", "remove"]),
                              st.sampled_from(["a", "b", "c"]), st.integers(0, 2),
                              st.sampled_from([0.0, 0.5, 1.0, 3.0]), st.integers(0, 10**6)),
                    max_size=120))
def test_every_item_leaves_exactly_once(capacity, fair, ops):
    """Against a brute-force model: every pushed item is popped, shed or removed
    exactly once; pops honour strict priority and per-team FIFO (FIFO by seq
    when not fair); sheds take the largest priority then the largest seq."""
    q = FairQueue(capacity=capacity, weights={"a": 2.0, "c": 0.5}, fair=fair)
    queued: dict[int, tuple[int, int, str, object]] = {}     # seq -> (prio, seq, team, item)
    outcomes: dict[int, int] = {}
    pushed = []
    seq = 0
    for op, team, prio, cost, k in ops:
        if op == "push":
            item = object()
            pushed.append(item)
            queued[seq] = (prio, seq, team, item)
            shed = q.push(item, team=team, priority=prio, cost=cost, seq=seq)
            seq += 1
            expected = []
            while capacity is not None and len(queued) > capacity:
                worst = max(queued.values(), key=lambda r: (r[0], r[1]))
                expected.append(worst[3])
                del queued[worst[1]]
            assert [id(x) for x in shed] == [id(x) for x in expected]
            for x in shed:
                outcomes[id(x)] = outcomes.get(id(x), 0) + 1
        elif op == "pop":
            peeked = q.peek()
            item = q.pop()
            assert item is peeked
            if not queued:
                assert item is None
                continue
            rec = next(r for r in queued.values() if r[3] is item)
            assert rec[0] == min(r[0] for r in queued.values())
            if fair:
                assert rec[1] == min(r[1] for r in queued.values()
                                     if r[0] == rec[0] and r[2] == rec[2])
            else:
                assert rec[1] == min(r[1] for r in queued.values() if r[0] == rec[0])
            del queued[rec[1]]
            outcomes[id(item)] = outcomes.get(id(item), 0) + 1
        else:
            if queued and k % 4:
                rec = sorted(queued.values(), key=lambda r: r[1])[k % len(queued)]
                assert q.remove(rec[3]) is True
                del queued[rec[1]]
                outcomes[id(rec[3])] = outcomes.get(id(rec[3]), 0) + 1
            else:
                assert q.remove(object()) is False
        assert len(q) == len(queued)
        for t in "abc":
            assert q.len_team(t) == sum(r[2] == t for r in queued.values())
    for item in drain(q):
        outcomes[id(item)] = outcomes.get(id(item), 0) + 1
    assert len(q) == 0
    assert [outcomes.get(id(x), 0) for x in pushed] == [1] * len(pushed)


@settings(max_examples=200, deadline=None)
@given(w_a=st.floats(0.25, 4.0), w_b=st.floats(0.25, 4.0),
       arrivals=st.lists(st.tuples(st.booleans(), st.floats(0.1, 5.0)),
                         min_size=2, max_size=80))
def test_fair_share_bound_while_both_backlogged(w_a, w_b, arrivals):
    """While both teams are backlogged, their weight-normalised service differs
    by at most one largest item: |W_a/w_a - W_b/w_b| <= max(l_a/w_a, l_b/w_b)."""
    q = FairQueue(capacity=None, weights={"a": w_a, "b": w_b})
    remaining = {"a": 0, "b": 0}
    l_max = {"a": 0.0, "b": 0.0}
    for seq, (is_a, cost) in enumerate(arrivals):
        team = "a" if is_a else "b"
        q.push(Item(f"{team}{seq}", team, cost=cost), team=team, priority=0, cost=cost, seq=seq)
        remaining[team] += 1
        l_max[team] = max(l_max[team], cost)
    bound = max(l_max["a"] / w_a, l_max["b"] / w_b) + 1e-9
    work = {"a": 0.0, "b": 0.0}
    while remaining["a"] and remaining["b"]:
        item = q.pop()
        work[item.team] += item.cost
        remaining[item.team] -= 1
        assert abs(work["a"] / w_a - work["b"] / w_b) <= bound


def test_large_interleaved_workload_is_fast_and_bounded():
    """100k mixed operations with timeouts run quickly and lazy-deletion
    leftovers stay bounded (heaps are compacted)."""
    q = FairQueue(capacity=500, weights={"t0": 3.0})
    rnd = random.Random(1)
    live = []
    for seq in range(100_000):
        item = Item(str(seq), f"t{seq % 7}")
        live.append(item)
        q.push(item, team=item.team, priority=rnd.randrange(3), cost=rnd.random(), seq=seq)
        r = rnd.random()
        if r < 0.3:
            q.pop()
        elif r < 0.6 and live:
            q.remove(live[rnd.randrange(len(live))])
        if len(live) > 2000:
            live = live[-1000:]
    assert len(q) <= 500
    assert len(q._shed_heap) <= 2 * len(q) + 64 + 1
    for level in q._levels.values():
        assert len(level.heap) <= 2 * level.live + 64 + 1
        for team in level.teams.values():
            assert len(team.fifo) <= 2 * team.live + 64 + 1
