"""Scheduled: a replica count by time of day, ignoring load.

The table lists ``[time, replicas]`` rows (or ``{at: time, replicas: N}``
mappings); each count holds from its time until the next row's time. Run
time is taken modulo ``period`` (a day unless set), and the schedule wraps
around: before the first row's time, the last row's count applies. So::

    table: [["08:00", 10], ["20:00", 2]]

asks for 10 replicas from 08:00 (28 800 s) up to but excluding 20:00
(72 000 s) and for 2 from 20:00 through midnight until 08:00 the next day.
A time is ``"HH:MM"`` or ``"HH:MM:SS"``, a number of seconds, or a
duration with a unit (``"8h"``). Rows must be in strictly increasing time
order within ``[0, period)``.
"""
from __future__ import annotations

import bisect
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from sim.config import units
from sim.autoscalers.base import DEFAULT_TICK_S, Autoscaler, AutoscalerConfigBase, Problem
from sim.config.common import PositiveSeconds, ReplicaFloor, StrictModel

_CLOCK = re.compile(r"^\s*(\d+):([0-5]\d)(?::([0-5]\d(?:\.\d*)?))?\s*$")


def _time_of_day(value: Any) -> float:
    """``"08:30"`` -> 30600.0; ``"08:30:15"`` -> 30615.0; numbers are seconds."""
    if isinstance(value, str) and ":" in value:
        match = _CLOCK.match(value)
        if match is None:
            raise ValueError(f"cannot read {value!r} as a time of day; write 'HH:MM' or "
                             f"'HH:MM:SS' (minutes and seconds below 60)")
        hours, minutes, secs = match.groups()
        return int(hours) * 3600.0 + int(minutes) * 60.0 + float(secs or 0.0)
    out = units.seconds(value)
    if out < 0:
        raise ValueError(f"a time of day must be at least 0, got {value!r}")
    return out


TimeOfDay = Annotated[float, BeforeValidator(_time_of_day)]


class ScheduleEntry(StrictModel):
    """From ``at`` (seconds into the period) on, ask for ``replicas``."""

    at: TimeOfDay = Field(description="Time of day: 'HH:MM', 'HH:MM:SS' or seconds")
    replicas: ReplicaFloor = Field(description="Replica count from this time on")

    @model_validator(mode="before")
    @classmethod
    def _from_row(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise ValueError(f"a table row is [time, replicas], got {list(value)!r}")
            return {"at": value[0], "replicas": value[1]}
        return value


class ScheduledConfig(AutoscalerConfigBase):
    type: Literal["scheduled"] = "scheduled"
    table: tuple[ScheduleEntry, ...] = Field(
        min_length=1,
        description="[[time, replicas], ...] or [{at: time, replicas: N}, ...]; times "
                    "strictly increase within the period")
    period: PositiveSeconds = Field(86400.0, description="Length of one cycle (a day)")

    @model_validator(mode="after")
    def _check_table(self) -> "ScheduledConfig":
        times_s = [row.at for row in self.table]
        for i in range(1, len(times_s)):
            if not times_s[i] > times_s[i - 1]:
                raise ValueError(f"table times must strictly increase; row {i} at "
                                 f"{times_s[i]:g} s is not after row {i - 1} at "
                                 f"{times_s[i - 1]:g} s")
        if times_s[-1] >= self.period:
            raise ValueError(f"table times must be less than the period ({self.period:g} s); "
                             f"row {len(times_s) - 1} is at {times_s[-1]:g} s")
        return self

    def problems(self, run_s: float) -> list[Problem]:
        """A schedule that asks for no replica while the run lasts, or has a row that
        holds for less than the time between two decisions (it might never take
        effect)."""
        times_s, counts = [row.at for row in self.table], [row.replicas for row in self.table]
        if all(n == 0 for n in counts):
            return [(("table",), "every row asks for 0 replicas: the pool would never serve "
                     "a request")]
        # the rows in force during [0, run_s): the one at time 0 (the last row before the
        # first time), and every row whose time comes before the run ends
        live = {counts[bisect.bisect_right(times_s, 0.0) - 1]}
        live |= {n for t, n in zip(times_s, counts) if run_s >= self.period or t < run_s}
        if live == {0}:
            return [(("table",), f"the rows in force during the run ({run_s:g} s with its "
                     "drain) all ask for 0 replicas: the pool would never serve a request")]
        problems = []
        ends_s = times_s[1:] + [self.period + times_s[0]]
        for i, (start_s, end_s) in enumerate(zip(times_s, ends_s)):
            if len(times_s) > 1 and end_s - start_s < DEFAULT_TICK_S:
                problems.append((("table", i), f"row {i} holds for {end_s - start_s:g} s, "
                                 f"less than the {DEFAULT_TICK_S:g} s between two autoscaler "
                                 "decisions: it might never take effect"))
        return problems

    def start_problems(self, cold_start_s: float) -> list[Problem]:
        """A row that adds replicas and is undone (the count back to what it was, or
        lower) before one of them could have started: they are billed, never serve."""
        n = len(self.table)
        if n < 2 or cold_start_s <= 0:
            return []
        times_s = [row.at for row in self.table]
        counts = [row.replicas for row in self.table]
        for i in range(n):
            before = counts[i - 1]
            if counts[i] <= before:
                continue
            for k in range(1, n):           # the first later row that undoes the raise
                j = (i + k) % n
                if counts[j] <= before:
                    held_s = (times_s[j] - times_s[i]) % self.period
                    if held_s < cold_start_s:
                        return [(("table", i), (
                            f"row {i} adds replicas ({before} -> {counts[i]}) for {held_s:g} "
                            f"s (row {j} asks for {counts[j]}), less than the "
                            f"{cold_start_s:.3g} s a new replica takes to start (cold_start: "
                            "provisioning + weights / load_bandwidth): they would be stopped "
                            "before ever serving; hold the row longer or drop it"))]
                    break
        return []


class ScheduledAutoscaler(Autoscaler):
    def __init__(self, cfg: ScheduledConfig) -> None:
        self.cfg = cfg
        self._times_s = [row.at for row in cfg.table]
        self._replicas = [row.replicas for row in cfg.table]

    def replicas_at(self, now_s: float) -> int:
        """The table's count at run time ``now_s``."""
        i = bisect.bisect_right(self._times_s, now_s % self.cfg.period) - 1
        return self._replicas[i]       # i == -1: before the first row, the last one holds

    def desired(self, now_s: float, current: int, ready: int) -> int:
        return self.replicas_at(now_s)
