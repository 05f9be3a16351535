"""Bounded waiting queue of a gateway pool: strict priority, fair share
between teams, and load shedding.

Order of service:

* Strict priority between priority values: the smallest value (the most
  urgent) is always served first.
* Within one priority value, with ``fair=True``, weighted fair queueing
  between teams (start-time fair queueing). Each team has a FIFO; its head
  gets a virtual start tag ``max(V, team's last finish tag)`` and a finish
  tag ``start + cost / weight``. The head with the smallest finish tag is
  served (ties by ``seq``), and the virtual time V moves up to its start
  tag. A continuously backlogged team thus gets service in proportion to
  its weight, and a team that floods the queue cannot starve another. Tags
  are given when an item reaches the head of its team's FIFO, so an item
  that is removed or shed before service costs its team nothing. A
  priority level forgets its fair-queue state whenever it empties.
* With ``fair=False``: FIFO by ``seq`` within a priority value.

When a push takes the queue over ``capacity``, items are shed: the largest
priority value (least urgent) first, and among those the newest (largest
``seq``) -- possibly the item just pushed.

Items are tracked by identity (they need not be hashable). Every operation
is O(log n) amortised: heaps with lazy deletion, compacted when stale
entries outnumber live ones.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import count
from typing import Any, Generic, Iterator, TypeVar

T = TypeVar("T")

# Rebuild a lazily-deleted heap or deque once it holds this many more stale
# entries than live ones.
_COMPACT_SLACK = 64


class _Entry:
    __slots__ = ("item", "team", "priority", "cost", "seq", "uid", "alive",
                 "tagged", "start", "finish")

    def __init__(self, item: Any, team: str, priority: int, cost: float, seq: int,
                 uid: int) -> None:
        self.item = item
        self.team = team
        self.priority = priority
        self.cost = cost
        self.seq = seq
        self.uid = uid
        self.alive = True
        self.tagged = False      # is it its team's head, with tags and a heap record?
        self.start = 0.0
        self.finish = 0.0


class _Team:
    """One team's FIFO within one priority level."""

    __slots__ = ("fifo", "live", "last_finish", "weight")

    def __init__(self, weight: float) -> None:
        self.fifo: deque[_Entry] = deque()
        self.live = 0
        self.last_finish = 0.0
        self.weight = weight


class _Level:
    """All items of one priority value."""

    __slots__ = ("live", "heap", "teams", "vtime")

    def __init__(self) -> None:
        self.live = 0
        # fair: (finish, seq, uid, entry) for team heads; FIFO: (seq, uid, entry).
        self.heap: list[tuple] = []
        self.teams: dict[str, _Team] = {}
        self.vtime = 0.0


class FairQueue(Generic[T]):
    """Bounded priority queue with weighted fair sharing between teams.

    ``capacity`` None means unbounded. ``weights`` maps team to its share
    weight (teams not listed get ``default_weight``); weights are used only
    when ``fair`` is on.
    """

    def __init__(self, capacity: int | None, weights: dict[str, float] | None = None,
                 default_weight: float = 1.0, fair: bool = True) -> None:
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be at least 0 (or None), got {capacity}")
        for team, w in (weights or {}).items():
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"weight of team {team!r} must be finite and > 0, got {w}")
        if not (math.isfinite(default_weight) and default_weight > 0):
            raise ValueError(f"default_weight must be finite and > 0, got {default_weight}")
        self.capacity = capacity
        self.weights = dict(weights or {})
        self.default_weight = float(default_weight)
        self.fair = fair
        self._entries: dict[int, _Entry] = {}          # id(item) -> entry
        self._levels: dict[int, _Level] = {}
        self._priorities: list[int] = []               # heap of priority values, lazy
        self._priority_set: set[int] = set()
        self._shed_heap: list[tuple] = []              # (-priority, -seq, -uid, entry), lazy
        self._team_counts: dict[str, int] = {}
        self._uids = count()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __contains__(self, item: object) -> bool:
        return id(item) in self._entries

    def __iter__(self) -> Iterator[T]:
        """Queued items, in push order."""
        return iter([e.item for e in self._entries.values()])

    def len_team(self, team: str) -> int:
        """Items of ``team`` queued, over all priority values."""
        return self._team_counts.get(team, 0)

    def peek(self) -> T | None:
        """The item :meth:`pop` would return, without removing it."""
        entry = self._next_entry()
        return None if entry is None else entry.item

    # ---------------------------------------------------------------- mutations

    def push(self, item: T, *, team: str, priority: int, cost: float, seq: int) -> list[T]:
        """Enqueue ``item``; returns the items shed to stay within capacity.

        The list is empty when nothing was shed, and may hold ``item``
        itself when it is the least urgent and newest.
        """
        key = id(item)
        if key in self._entries:
            raise ValueError("item is already queued")
        if not (math.isfinite(cost) and cost >= 0):
            raise ValueError(f"cost must be finite and at least 0, got {cost}")
        entry = _Entry(item, team, priority, float(cost), seq, next(self._uids))
        self._entries[key] = entry
        self._team_counts[team] = self._team_counts.get(team, 0) + 1

        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = _Level()
            if priority not in self._priority_set:
                self._priority_set.add(priority)
                heapq.heappush(self._priorities, priority)
        level.live += 1
        if self.fair:
            t = level.teams.get(team)
            if t is None:
                t = level.teams[team] = _Team(self.weights.get(team, self.default_weight))
            t.fifo.append(entry)
            t.live += 1
            if t.live == 1:
                self._tag_head(level, t)
        else:
            heapq.heappush(level.heap, (seq, entry.uid, entry))

        if self.capacity is None:
            return []
        heapq.heappush(self._shed_heap, (-priority, -seq, -entry.uid, entry))
        shed: list[T] = []
        while len(self._entries) > self.capacity:
            victim = self._shed_heap[0][-1]
            while not victim.alive:
                heapq.heappop(self._shed_heap)
                victim = self._shed_heap[0][-1]
            heapq.heappop(self._shed_heap)
            self._discard(victim)
            shed.append(victim.item)
        self._compact_shed_heap()
        return shed

    def pop(self) -> T | None:
        """Remove and return the next item to serve, or None when empty."""
        entry = self._next_entry()
        if entry is None:
            return None
        level = self._levels[entry.priority]
        heapq.heappop(level.heap)       # _next_entry left entry's record on top
        if self.fair:
            t = level.teams[entry.team]
            t.last_finish = entry.finish
            level.vtime = max(level.vtime, entry.start)
        self._discard(entry)
        return entry.item

    def remove(self, item: T) -> bool:
        """Take ``item`` out of the queue (e.g. it timed out); False if not queued."""
        entry = self._entries.get(id(item))
        if entry is None:
            return False
        self._discard(entry)
        return True

    # ---------------------------------------------------------------- internals

    def _next_entry(self) -> _Entry | None:
        """Live entry to serve next; its record is left on top of its level's heap."""
        prios = self._priorities
        while prios:
            level = self._levels.get(prios[0])
            if level is None:                   # emptied since: drop lazily
                self._priority_set.discard(heapq.heappop(prios))
                continue
            heap = level.heap
            while not heap[0][-1].alive:
                heapq.heappop(heap)
            return heap[0][-1]
        return None

    def _tag_head(self, level: _Level, t: _Team) -> None:
        """Give the first live entry of ``t`` its tags and a heap record."""
        fifo = t.fifo
        while not fifo[0].alive:
            fifo.popleft()
        head = fifo[0]
        head.start = max(level.vtime, t.last_finish)
        head.finish = head.start + head.cost / t.weight
        head.tagged = True
        heapq.heappush(level.heap, (head.finish, head.seq, head.uid, head))

    def _discard(self, entry: _Entry) -> None:
        """Forget a live entry (served, shed or removed) everywhere."""
        entry.alive = False
        del self._entries[id(entry.item)]
        n = self._team_counts[entry.team] - 1
        if n:
            self._team_counts[entry.team] = n
        else:
            del self._team_counts[entry.team]

        level = self._levels[entry.priority]
        level.live -= 1
        if level.live == 0:                     # idle: forget the level's state
            del self._levels[entry.priority]
            return
        if self.fair:
            t = level.teams[entry.team]
            t.live -= 1
            if t.live == 0:
                # Keep the last finish tag: a team that comes back at once must
                # not restart at V ahead of teams that stayed backlogged. Once
                # V has caught up with it, the team is as good as new.
                t.fifo.clear()
                if t.last_finish <= level.vtime:
                    del level.teams[entry.team]
            elif entry.tagged:
                self._tag_head(level, t)
            elif len(t.fifo) > 2 * t.live + _COMPACT_SLACK:
                t.fifo = deque(e for e in t.fifo if e.alive)
        if len(level.heap) > 2 * level.live + _COMPACT_SLACK:
            level.heap = [r for r in level.heap if r[-1].alive]
            heapq.heapify(level.heap)

    def _compact_shed_heap(self) -> None:
        if len(self._shed_heap) > 2 * len(self._entries) + _COMPACT_SLACK:
            self._shed_heap = [r for r in self._shed_heap if r[-1].alive]
            heapq.heapify(self._shed_heap)
