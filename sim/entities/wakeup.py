"""The lightest timed call the SimPy clock takes: a slotted wake-up.

A large run schedules millions of plain "call me at t" events (every
replica's segment ends, every arrival). A ``simpy.Timeout`` costs an object
with an attribute dict and a fresh callbacks list each; a ``WakeUp`` is a
one-slot object whose callbacks are a tuple the caller keeps and reuses.
It goes on SimPy's own queue as ``Environment.schedule`` puts events there
(time, priority, event number, event), pushed directly to save two Python
calls per event, so it is ordered with every other event exactly as a
``Timeout`` of the same delay scheduled at the same moment would be (SimPy
is pinned below 5 for this layout).

What SimPy's event loop (``Environment.step``) asks of an event it processes:
``callbacks`` (read, then set to None, then each called with the event) and
``_ok`` (True: a wake-up never fails). ``tests/core/test_wakeup.py`` checks that
contract against the installed SimPy.

A wake-up that is no longer wanted is ``cancel``-led: it stays on the queue
(SimPy cannot take an event back) but calls nothing when its time comes.
"""
from __future__ import annotations

from heapq import heappush
from typing import Callable

import simpy
from simpy.events import NORMAL

Callbacks = tuple[Callable[["WakeUp"], None], ...]
_NOTHING: Callbacks = ()


class WakeUp:
    """Made by ``call_after`` (which sets ``callbacks`` without an ``__init__`` frame)."""

    __slots__ = ("callbacks",)
    _ok = True                  # SimPy's loop checks this after the callbacks
    callbacks: Callbacks | None

    @property
    def pending(self) -> bool:
        """Not yet processed (or cancelled)."""
        return bool(self.callbacks)

    def cancel(self) -> None:
        """Call nothing when the time comes (a no-op once processed)."""
        if self.callbacks is not None:
            self.callbacks = _NOTHING


_new_wakeup = object.__new__


def call_after(env: simpy.Environment, delay_s: float, callbacks: Callbacks,
               replacing: WakeUp | None = None) -> WakeUp:
    """Call each of ``callbacks`` with the wake-up ``delay_s`` from now, after
    the events already scheduled for that instant. ``replacing``, an earlier
    wake-up of the caller, is cancelled if it is still pending."""
    if delay_s < 0:
        raise ValueError(f"negative delay {delay_s}")
    if replacing is not None and replacing.callbacks:
        replacing.callbacks = _NOTHING
    wake = _new_wakeup(WakeUp)
    wake.callbacks = callbacks
    heappush(env._queue, (env._now + delay_s, NORMAL, next(env._eid), wake))
    return wake


def events_scheduled(env: simpy.Environment) -> int:
    """How many events ``env`` has scheduled so far: SimPy numbers them from one counter,
    whose next value is the count (reading it uses one number, after the run)."""
    return next(env._eid)
