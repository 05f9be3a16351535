"""The bare wake-up against the installed SimPy's event loop."""
from __future__ import annotations

import pytest
import simpy

from sim.entities.wakeup import call_after


def test_wakeup_fires_at_its_time_with_each_callback():
    env = simpy.Environment()
    seen = []
    wake = call_after(env, 2.5, (lambda e: seen.append(("a", env.now, e)),
                                 lambda e: seen.append(("b", env.now, e))))
    assert wake.pending
    env.run()
    assert seen == [("a", 2.5, wake), ("b", 2.5, wake)]
    assert not wake.pending and wake.callbacks is None


def test_wakeups_and_timeouts_keep_scheduling_order_within_an_instant():
    env = simpy.Environment()
    order = []
    env.timeout(1.0).callbacks.append(lambda _e: order.append("timeout 1"))
    call_after(env, 1.0, (lambda _e: order.append("wake 2"),))
    env.timeout(1.0).callbacks.append(lambda _e: order.append("timeout 3"))
    call_after(env, 0.5, (lambda _e: order.append("wake 0"),))

    def proc():
        yield env.timeout(1.0)
        order.append("process 4")
    env.process(proc())
    env.run()
    assert order == ["wake 0", "timeout 1", "wake 2", "timeout 3", "process 4"]


def test_cancelled_wakeup_calls_nothing_and_the_run_goes_on():
    env = simpy.Environment()
    seen = []
    wake = call_after(env, 1.0, (lambda _e: seen.append("cancelled"),))
    call_after(env, 2.0, (lambda _e: seen.append(env.now),))
    wake.cancel()
    assert not wake.pending
    env.run()
    assert seen == [2.0]
    wake.cancel()                      # after processing: nothing to do
    assert wake.callbacks is None


def test_run_until_an_event_stops_between_wakeups():
    env = simpy.Environment()
    stop = env.event()
    seen = []
    call_after(env, 1.0, (lambda _e: stop.succeed(),))
    call_after(env, 3.0, (lambda _e: seen.append(env.now),))
    env.run(until=stop)
    assert env.now == 1.0 and seen == []
    env.run()
    assert seen == [3.0]


def test_negative_delay_is_refused():
    with pytest.raises(ValueError, match="negative delay"):
        call_after(simpy.Environment(), -1e-9, ())
