"""`size`'s progress line: the trial running, the time since the command started and an
estimate of what is left, on stderr, from the first second.

The line is drawn as each trial starts (so it shows before the first trial ends, however
long that one takes) and, on a terminal, redrawn every second so that the elapsed time
keeps moving through a long trial. The trial running tells the line what share of its
arrival window it has simulated (:func:`sim.planning.progress.telling`), so what is left
is estimated from the first second: the trial running's time so far over that share, for
it and (until a trial has ended) for each still to run; once trials have ended, their
mean time for each still to run (see :mod:`sim.planning.progress`). Like the other progress bars it is drawn only on a
terminal (a log or a pipe gets the result lines alone) and ``--quiet`` turns it off.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from sim.planning.progress import telling

CLEAR = "\r\x1b[K"          # back to the line's start, and clear it
CLOCK = time.monotonic      # the line's clock where none is given
SURE_SHARE = 0.01           # a trial's share simulated from which its time is estimated


def duration_text(seconds: float) -> str:
    """A duration as people read it: 42 s, 3 min 5 s, 2 h 4 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class TrialLine:
    """A :data:`~sim.planning.progress.Watch` drawing one line on ``stream`` (default
    stderr). ``clock``: seconds from any origin (default :data:`CLOCK`; a test's
    fake clock); ``tick_s``: how often a terminal's line
    is redrawn between trials (None: only as each trial starts)."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 clock: Callable[[], float] | None = None,
                 tick_s: float | None = 1.0) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock if clock is not None else CLOCK
        self.start_s = self.clock()
        self.shown = self.stream.isatty()
        self._state: tuple[str, int, int, str] | None = None
        self._at_start_s = 0.0      # elapsed when the trial running started
        self._share = 0.0           # of the running trial's arrival window, simulated
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        if self.shown and tick_s is not None:
            self._ticker = threading.Thread(target=self._tick, args=(tick_s,), daemon=True)
            self._ticker.start()

    def __call__(self, what: str, done: int, most_left: int, unit: str = "trial") -> None:
        with self._lock:
            self._state = (what, done, most_left, unit)
            self._at_start_s = self.clock() - self.start_s
            self._share = 0.0
            self._draw()

    def simulated(self, share: float) -> None:
        """The running trial has simulated ``share`` of its arrival window (a
        :data:`~sim.planning.progress.Simulated`); drawn at the next tick."""
        with self._lock:
            self._share = share

    def text(self) -> str:
        """The line as it stands (empty before the first trial)."""
        if self._state is None:
            return ""
        what, done, most_left, unit = self._state
        elapsed_s = self.clock() - self.start_s
        line = (f"{self.label}: {unit} {done + 1}/≤{done + most_left}: {what} ... "
                f"elapsed {duration_text(elapsed_s)}")
        if unit == "option":
            line = (f"{self.label}: {what} ... elapsed {duration_text(elapsed_s)}")
        ran_s = elapsed_s - self._at_start_s        # the trial running, so far
        # the running trial's whole time, from its share simulated (once it is past the
        # first percent: sooner, a run's set-up would weigh as if it were the rate)
        running_s = ran_s / self._share if self._share >= SURE_SHARE else None
        if self._share > 0.0 and unit == "trial":
            line += f" (simulated {self._share:.0%})"
        if done or running_s is not None:
            each_s = self._at_start_s / done if done else running_s
            this_s = running_s if running_s is not None else each_s
            left_s = max(0.0, this_s - ran_s) + each_s * (most_left - 1)
            line += f", about {duration_text(left_s)} left at most"
        return line

    def _draw(self) -> None:
        if self.shown and self._state is not None:
            self.stream.write(CLEAR + self.text())
            self.stream.flush()

    def _tick(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            with self._lock:
                self._draw()

    def __enter__(self) -> "TrialLine":
        """Drawn while the block runs, told by each trial of its progress; stopped after."""
        self._telling = telling(self.simulated)
        self._telling.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._telling.__exit__(*exc)
        self.stop()

    def stop(self) -> None:
        """Stop redrawing and clear the line (the results follow on a clean terminal)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.shown and self._state is not None:
                self.stream.write(CLEAR)
                self.stream.flush()
            self._state = None
