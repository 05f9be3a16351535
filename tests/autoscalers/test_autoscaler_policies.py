"""Autoscaling policies as pure decisions: target tracking (panic, tolerance,
cooldowns, rate limits, bounds, scale to zero, activation, TTFT), the
time-of-day schedule, the fixed policy, and config validation.

Unless a test says otherwise, the pool is modelled by feeding
``queue_per_replica = total / ready`` with ``ready`` alongside, observing
then deciding at each tick, as the pool does."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.autoscalers import (AutoscalerConfig, FixedAutoscaler, ScheduledAutoscaler,
                             TargetAutoscaler, build_autoscaler)

ADAPTER = TypeAdapter(AutoscalerConfig)


def make(**fields):
    """A policy built from a config dict, as a scenario file would give it."""
    return build_autoscaler(ADAPTER.validate_python(fields))


def simple_target(**overrides):
    """Queue target 1 per replica used at 100 %, no tolerance or cooldowns: the
    count is just ceil(total queue / 1)."""
    fields = dict(type="target", metric="queue_per_replica", target=1.0,
                  target_utilization=1.0, tolerance=0.0, scale_down_cooldown=0,
                  max_replicas=100)
    fields.update(overrides)
    return make(**fields)


def sample(total, ready):
    per_replica = total / max(ready, 1)
    return {"queue_per_replica": per_replica, "inflight_per_replica": per_replica,
            "ready": ready}


def drive(scaler, load, times, current, ready=None):
    """Observe then decide at each time. ``load(t)`` is the pool's total queue;
    with ``ready`` None every requested replica is ready at once, else the
    ready count stays fixed. Returns {time: answer}."""
    out = {}
    for t in times:
        r = current if ready is None else ready
        scaler.observe(t, sample(load(t), r))
        current = scaler.desired(t, current, r)
        out[t] = current
    return out


def ticks(start, stop, step=2):
    return [float(t) for t in range(start, stop + 1, step)]


# --- target: panic -----------------------------------------------------------------------

def test_a_load_step_panics_on_the_next_tick_and_never_scales_down_in_panic():
    """KPA defaults, target 2 per replica at 70 % (effective 1.4), 3 replicas
    ready throughout (the new ones are still starting).

    1 per replica (total 3) -> ceil(3/1.4) = 3: steady. At t=100 the queue
    steps to 10 per replica (total 30). At t=100 that sample has held for no
    time, so nothing changes. At t=102 the 6 s panic window holds 4 s of 3
    and 2 s of 30: mean 12, ceil(12/1.4) = 9 >= 2 * 3 ready: panic, answer 9
    (the stable window alone says ceil(3.9/1.4) = 3). t=104: (2*3 + 4*30)/6 =
    21 -> 15; t=106: 30 -> 22.

    The load falls back at t=110; the last tick meeting the panic condition
    is t=114 (window mean 12 -> 9 >= 6), so panic lasts until t=174 and the
    count stays 22 although the panic window reads 3; at t=174 the stable
    count 3 applies."""
    scaler = make(type="target", metric="queue_per_replica", target=2, max_replicas=100)
    load = lambda t: 30.0 if 100 <= t < 110 else 3.0      # noqa: E731
    out = drive(scaler, load, ticks(0, 200), current=3, ready=3)
    assert all(out[t] == 3 for t in ticks(0, 100))
    assert [out[t] for t in (102.0, 104.0, 106.0, 108.0)] == [9, 15, 22, 22]
    assert all(out[t] == 22 for t in ticks(110, 172))
    assert out[174.0] == 3
    assert not scaler.panicking


# --- target: stable regime -----------------------------------------------------------------

def test_a_change_within_tolerance_keeps_the_current_count():
    """10 replicas, tolerance 0.1: a count of 11 or 9 (|change| <= 1) is
    ignored; 12 is applied."""
    for total, expected in ((11.0, 10), (9.0, 10), (12.0, 12)):
        scaler = simple_target(tolerance=0.1, panic_threshold=100)
        out = drive(scaler, lambda t: total, ticks(0, 60), current=10)
        assert out[60.0] == expected, total


def test_no_data_holds_the_count_and_bounds_still_apply():
    """Without samples the policy keeps current, raised to min_replicas."""
    scaler = simple_target(min_replicas=2, max_replicas=5)
    assert scaler.desired(0.0, 3, 3) == 3
    assert scaler.desired(2.0, 0, 0) == 2
    assert scaler.desired(4.0, 9, 9) == 5


def test_no_scale_down_before_a_full_stable_window():
    """Total 5 on 10 replicas from t=0: the stable count 5 only applies once
    60 s of observations exist."""
    scaler = simple_target()
    out = drive(scaler, lambda t: 5.0, ticks(0, 60), current=10)
    assert all(out[t] == 10 for t in ticks(0, 58))
    assert out[60.0] == 5


def test_scale_down_follows_the_stable_window_then_waits_for_the_cooldown():
    """Total 10 on 10 replicas; at t=100 it halves to 5. The 60 s stable mean
    falls by 5/60 per second: at t=110 it is 9.17 (-> 10), at t=112 it is 9:
    down to 9. The next step down waits for scale_down_cooldown (300 s after
    t=112): at t=412 the count goes to 5."""
    scaler = simple_target(scale_down_cooldown=300)
    out = drive(scaler, lambda t: 10.0 if t < 100 else 5.0, ticks(0, 420), current=10)
    assert all(out[t] == 10 for t in ticks(0, 110))
    assert out[112.0] == 9
    assert all(out[t] == 9 for t in ticks(114, 410))
    assert out[412.0] == 5


def test_scale_up_cooldown_spaces_scale_ups():
    """Cooldown 10 s, no panic. Total 6 at t=0 -> 6 replicas. Total 9 from
    t=2: the stable mean asks for 8 at t=4 (mean 7.5) but the last scale-up
    was at t=0, so the count stays 6 until t=10, when the mean 8.4 -> 9."""
    scaler = simple_target(scale_up_cooldown=10, panic_threshold=100)
    out = drive(scaler, lambda t: 6.0 if t < 2 else 9.0, ticks(0, 10), current=4)
    assert out[0.0] == 6
    assert [out[t] for t in (2.0, 4.0, 6.0, 8.0)] == [6, 6, 6, 6]
    assert out[10.0] == 9


def test_answers_stay_within_min_and_max():
    """min 2, max 5: a total of 100 asks for 100 (panic) but gets 5; no load
    after a full window asks for 0 but gets 2."""
    high = simple_target(min_replicas=2, max_replicas=5)
    high.observe(0.0, sample(100.0, 3))
    assert high.desired(0.0, 3, 3) == 5
    low = simple_target(min_replicas=2, max_replicas=5)
    out = drive(low, lambda t: 0.0, ticks(0, 60), current=3)
    assert out[60.0] == 2


def test_rate_limits_bound_each_step():
    """Up: rate 2 on 4 ready replicas allows at most ceil(2*4) = 8 (asked 40).
    Down: rate 4 on 20 ready allows no fewer than floor(20/4) = 5 (asked 1);
    the default rate 2 stops at 10."""
    up = simple_target(max_scale_up_rate=2)
    up.observe(0.0, sample(40.0, 4))
    assert up.desired(0.0, 4, 4) == 8
    down = simple_target(max_scale_down_rate=4)
    assert drive(down, lambda t: 1.0, ticks(0, 60), current=20, ready=20)[60.0] == 5
    down2 = simple_target()
    assert drive(down2, lambda t: 1.0, ticks(0, 60), current=20, ready=20)[60.0] == 10


# --- target: zero --------------------------------------------------------------------------

def test_scale_to_zero_only_after_the_grace_period_then_activation():
    """min 0, stable 10 s, grace 30 s. Total 3 until t=100, then nothing.
    The stable mean falls 3 -> 2 (t=104) -> 1 (t=108) -> 0 (t=110), but the
    last replica stays until the pool has been idle 30 s: zero at t=130.
    Work at t=140 with no replica ready asks for 1 at once."""
    scaler = simple_target(min_replicas=0, stable_window=10, panic_window=2,
                           scale_to_zero_grace=30)
    out = drive(scaler, lambda t: 3.0 if t < 100 else 0.0, ticks(0, 130), current=3)
    assert [out[t] for t in (100.0, 102.0, 104.0, 106.0, 108.0)] == [3, 3, 2, 2, 1]
    assert all(out[t] == 1 for t in ticks(110, 128))
    assert out[130.0] == 0
    scaler.observe(140.0, sample(5.0, 0))
    assert scaler.desired(140.0, 0, 0) == 1


def test_activation_from_zero():
    """No replica ready, queue waiting: at least one replica. With the queue
    metric the count follows the queue (3 waiting, target 1 -> 3); with a
    metric that needs ready replicas (KV use) it is 1. Idle: stays at 0."""
    q = simple_target(min_replicas=0)
    assert q.desired(0.0, 0, 0) == 0
    q.observe(2.0, sample(3.0, 0))
    assert q.desired(2.0, 0, 0) == 3
    kv = make(type="target", metric="kv_util", target=0.8, min_replicas=0, max_replicas=4)
    kv.observe(0.0, {"kv_util": 0.0, "queue_per_replica": 4.0})
    assert kv.desired(0.0, 0, 0) == 1
    idle = simple_target(min_replicas=0)
    idle.observe(0.0, sample(0.0, 0))
    assert idle.desired(0.0, 0, 0) == 0


# --- target: TTFT --------------------------------------------------------------------------

def _ttft_scaler(**overrides):
    fields = dict(type="target", metric="ttft_p95", target="1s", target_utilization=1.0,
                  max_replicas=50)
    fields.update(overrides)
    return make(**fields)


def test_ttft_p95_above_target_scales_up_proportionally():
    """4 replicas, target p95 1 s. 20 requests at 0.9 s: ceil(4*0.9) = 4,
    steady. Then 10 at 1.2 s (t=20..29): p95 of the 30 in the window is 1.2,
    ceil(4*1.2) = 5 (below the panic threshold of 8): 5."""
    scaler = _ttft_scaler()
    for t in range(20):
        scaler.observe_ttft(float(t), 0.9)
    assert scaler.desired(19.0, 4, 4) == 4
    for t in range(20, 30):
        scaler.observe_ttft(float(t), 1.2)
    assert scaler.desired(29.0, 4, 4) == 5
    assert not scaler.panicking


def test_ttft_p95_far_above_target_panics():
    """As above but the late TTFTs are 3 s: p95 3 s in both windows,
    ceil(4*3) = 12 >= 2*4: panic, 12."""
    scaler = _ttft_scaler()
    for t in range(20):
        scaler.observe_ttft(float(t), 0.9)
    for t in range(20, 30):
        scaler.observe_ttft(float(t), 3.0)
    assert scaler.desired(29.0, 4, 4) == 12
    assert scaler.panicking


def test_ttft_observations_are_ignored_by_other_metrics():
    """A queue policy does not react to TTFTs."""
    scaler = simple_target()
    scaler.observe_ttft(0.0, 100.0)
    assert scaler.desired(0.0, 3, 3) == 3


@settings(max_examples=60, deadline=None)
@given(loads=st.lists(st.floats(0, 200), min_size=1, max_size=40),
       min_r=st.integers(0, 3), extra=st.integers(0, 10), start=st.integers(0, 15))
def test_answers_are_bounded_and_deterministic(loads, min_r, extra, start):
    """Any load sequence: every answer lies in [min, max]; the same inputs
    give the same answers."""
    fields = dict(type="target", metric="inflight_per_replica", target=4,
                  min_replicas=min_r, max_replicas=min_r + extra + 1)
    runs = []
    for _ in range(2):
        scaler = make(**fields)
        current, answers = start, []
        for i, total in enumerate(loads):
            t = 2.0 * i
            scaler.observe(t, {"inflight_per_replica": total / max(current, 1),
                               "ready": current})
            current = scaler.desired(t, current, current)
            assert fields["min_replicas"] <= current <= fields["max_replicas"]
            answers.append(current)
        runs.append(answers)
    assert runs[0] == runs[1]


# --- scheduled and fixed -------------------------------------------------------------------

def test_schedule_counts_at_boundaries_and_wrap_around():
    """08:00 -> 10, 20:00 -> 2: before 08:00 the 20:00 row (from the day
    before) applies; each count starts exactly at its time."""
    scaler = make(type="scheduled", table=[["08:00", 10], ["20:00", 2]])
    assert isinstance(scaler, ScheduledAutoscaler)
    expected = {0.0: 2, 28799.5: 2, 28800.0: 10, 71999.5: 10, 72000.0: 2, 86399.0: 2,
                86400.0 + 28800.0: 10, 3 * 86400.0 + 100.0: 2}
    for t, n in expected.items():
        assert scaler.desired(t, 5, 5) == n, t


def test_schedule_accepts_mappings_seconds_units_and_clock_times():
    """Rows as {at, replicas} or [time, replicas]; times as seconds, 'HH:MM',
    'HH:MM:SS' or durations with units. Here the first row is at 0, so there
    is no wrap-around."""
    scaler = make(type="scheduled", table=[
        {"at": 0, "replicas": 1}, {"at": "06:30", "replicas": 3}, ["06:30:15", 4],
        ["12h", 5]])
    assert [row.at for row in scaler.cfg.table] == [0.0, 23400.0, 23415.0, 43200.0]
    for t, n in {0.0: 1, 23399.0: 1, 23400.0: 3, 23415.0: 4, 43200.0: 5, 86000.0: 5}.items():
        assert scaler.desired(t, 0, 0) == n, t


def test_schedule_with_a_custom_period():
    """Period 1 h: 1 replica from :00, 4 from :30, every hour."""
    scaler = make(type="scheduled", period="1h", table=[[0, 1], ["0:30", 4]])
    for t, n in {0.0: 1, 1799.0: 1, 1800.0: 4, 3599.0: 4, 3600.0: 1, 5400.0: 4}.items():
        assert scaler.desired(t, 0, 0) == n, t


def test_fixed_keeps_the_current_count():
    """The fixed policy returns whatever count the pool has."""
    scaler = make(type="fixed")
    assert isinstance(scaler, FixedAutoscaler)
    assert scaler.desired(10.0, 7, 3) == 7
    assert scaler.desired(12.0, 0, 0) == 0
    assert scaler.tick_s == 2.0


def test_target_config_units_and_tick():
    """Durations take units; the tick is the config's."""
    scaler = make(type="target", metric="inflight_per_replica", target=8, max_replicas=4,
                  stable_window="2min", panic_window="12s", tick="500ms")
    assert isinstance(scaler, TargetAutoscaler)
    assert scaler.cfg.stable_window == 120.0 and scaler.cfg.panic_window == 12.0
    assert scaler.tick_s == 0.5


# --- validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    (dict(min_replicas=5, max_replicas=3),
     r"max_replicas \(3\) must be at least min_replicas \(5\)"),
    (dict(metric="latency"),
     "'queue_per_replica', 'inflight_per_replica', 'ttft_p95' or 'kv_util'"),
    (dict(stable_window=10, panic_window=20), "panic_window .* stable_window"),
    (dict(metric="kv_util", target=80), "fraction of the KV cache"),
    (dict(target=0), "greater than 0"),
    (dict(max_replicas=0), "greater than 0"),
    (dict(panic_threshold=1.0), "greater than 1"),
    (dict(tolerance=1.5), "less than 1"),
    (dict(max_scale_down_rate=1), "greater than 1"),
    (dict(scale_down_cooldown=-5), "at least 0"),
    (dict(stable_window="soon"), "cannot read 'soon' as a duration"),
    (dict(target_scale=3), "Extra inputs are not permitted"),
])
def test_target_config_errors(fields, message):
    """Each bad target config fails with a message naming the problem."""
    base = dict(type="target", metric="queue_per_replica", target=2, max_replicas=4)
    base.update(fields)
    with pytest.raises(ValidationError, match=message):
        ADAPTER.validate_python(base)


@pytest.mark.parametrize("table, message", [
    ([["20:00", 2], ["08:00", 10]], "strictly increase; row 1 at 28800 s is not after row 0"),
    ([["08:00", 2], [28800, 3]], "strictly increase"),
    ([["08:00", -1]], "greater than or equal to 0"),
    ([["08:61", 1]], "cannot read '08:61' as a time of day"),
    ([["24:00", 1]], "less than the period"),
    ([], "at least 1 item"),
    ([["08:00", 1, 2]], r"a table row is \[time, replicas\]"),
    ([{"at": "08:00", "replica": 1}], "replica"),
])
def test_scheduled_config_errors(table, message):
    """Unsorted, duplicate, negative, malformed or out-of-period rows fail."""
    with pytest.raises(ValidationError, match=message):
        ADAPTER.validate_python({"type": "scheduled", "table": table})


def test_unknown_policy_type_lists_the_choices():
    """A misspelt type names the valid ones."""
    with pytest.raises(ValidationError, match="'fixed', 'target', 'scheduled'"):
        ADAPTER.validate_python({"type": "targets"})
