"""A model server replica: runs its scheduler's segments on the SimPy clock.

The replica knows nothing of batching policy. It asks the scheduler for the
next segment and schedules one SimPy timeout for its end. New requests wake
an idle replica (after the events of the current instant, so simultaneous
arrivals share a step) and cut a fast-forwarded segment at the first step
boundary after the arrival, exactly where the step-by-step loop would have
admitted them. Callbacks on bare wake-ups (``sim.entities.wakeup``), the superseded
one cancelled, keep this to about one event per segment.

The engine decides which step an arrival can join (``sim/config/engines.py``): the
next one (a synchronous loop), the one after next (a scheduler that forms step k+1's
batch while step k runs: the request is held until step k+1 ends), or, with multi-step
scheduling, the first step of the next block of ``multi_step`` steps (held until the
running block ends). An engine with nothing to run schedules held requests at once.
A multi-step block's tokens reach the client at the block's end (or when the engine
runs out of work within it): a request that finishes in a block is handed on then, its
first token and finish as the client sees them.
"""
from __future__ import annotations

from bisect import bisect_left

from collections import deque

import simpy

from sim.recording.recorder import Recorder, StepRow
from sim.entities.request import Request
from sim.schedulers.base import Scheduler, Segment
from sim.recording.usage import PoolUsage
from sim.entities.wakeup import WakeUp, call_after

# A replica's life cycle: asked for (paid from then), serving, finishing what it holds,
# gone.
STARTING, READY, DRAINING, RELEASED = "starting", "ready", "draining", "released"


class Replica:
    __slots__ = ("env", "usage", "pool_code", "index", "scheduler", "recorder", "_timer",
                 "_seg", "_seg_start_s", "_seg_end_s", "_seg_steps", "_kick_pending", "state",
                 "requested_s", "released_s", "_end_calls", "_plan_calls", "_held",
                 "_after_next", "_block_steps", "_delayed", "_steps_done", "_block_end",
                 "_idle", "_pool_finish", "_block_done", "_block_ends")

    def __init__(self, env: simpy.Environment, pool_code: int, index: int,
                 scheduler: Scheduler, recorder: Recorder, usage: PoolUsage,
                 join_after_next: bool = False, multi_step: int = 1) -> None:
        self.env = env
        self.usage = usage
        self.pool_code = pool_code
        self.index = index
        self.scheduler = scheduler
        self.recorder = recorder
        self._timer: WakeUp | None = None   # the latest wake-up; any earlier one is cancelled
        self._end_calls = (self._end_segment,)
        self._plan_calls = (self._on_plan_timer,)
        self._seg: Segment | None = None
        self._seg_start_s = 0.0
        self._seg_end_s = 0.0           # when its steps that will be applied end
        self._seg_steps = 0             # steps of the running segment that will be applied
        self._kick_pending = False
        self.state = STARTING             # its life cycle: the methods below move it on
        self.requested_s = env.now        # paid for from here
        self.released_s = float("nan")
        # the engine's join rule: arrivals held until the step count that lets them in
        self._after_next = join_after_next
        self._block_steps = multi_step
        self._delayed = join_after_next or multi_step > 1
        self._held: deque[tuple[int, Request]] = deque()   # (step count, request)
        self._steps_done = 0            # steps applied since the replica started
        self._block_end = 0             # multi-step: the step count ending the running block
        self._idle = True               # no segment planned since the last went idle
        # multi-step: requests finished in the running block, handed on at its end
        self._pool_finish = scheduler.on_finish
        self._block_done: list[Request] = []
        self._block_ends: list[float] = []      # when each block ended, in order
        if multi_step > 1:
            scheduler.on_finish = self._finished_in_block

    # -- its life cycle, which the pool drives ------------------------------------------
    def become_ready(self) -> bool:
        """Starting -> ready (its cold start is over); False when it was cancelled."""
        if self.state != STARTING:
            return False
        self.state = READY
        return True

    def start_draining(self) -> None:
        """Ready -> draining: it takes nothing new and goes once its requests are done."""
        self.state = DRAINING

    def release(self) -> None:
        """Gone: no longer paid for from now."""
        self.state = RELEASED
        self.released_s = self.env.now

    # -- the router's view --------------------------------------------------------
    @property
    def num_outstanding(self) -> int:
        return self.scheduler.num_outstanding + len(self._held)

    @property
    def kv_usage(self) -> float:
        return self.scheduler.kv.usage

    @property
    def kv_blocks_total(self) -> int:
        """The replica's KV cache, in blocks."""
        return self.scheduler.kv.num_blocks

    def cached_prompt_tokens(self, req: Request) -> int:
        """Tokens of ``req``'s prompt this replica's prefix cache holds now (whole blocks
        from its start, as admission would find them; 0 without prefix caching)."""
        kv = self.scheduler.kv
        return kv.hit_blocks(req) * kv.block_size_tokens

    @property
    def num_waiting(self) -> int:
        """Requests handed to the replica and not yet running."""
        return self.scheduler.num_waiting + len(self._held)

    @property
    def num_running(self) -> int:
        return self.scheduler.num_running

    def open_requests(self):
        """Every request the replica holds, waiting or running."""
        return self.scheduler.open_requests() + [req for _, req in self._held]

    def submit(self, req: Request) -> None:
        req.replica = self.index
        seg = self._seg
        if seg is not None and self._delayed:
            self._hold(seg, req)
            return
        self.scheduler.add(req)
        if seg is None:
            self._kick()
        elif seg.interruptible and self._seg_steps == seg.num_steps:
            self._cut(seg)

    def _hold(self, seg: Segment, req: Request) -> None:
        """``req`` arrived while a step runs: it joins the step after next, or the next
        block; the running fast-forward is cut where it may join."""
        elapsed_s = self.env.now - self._seg_start_s
        # the step count once the step running now has ended
        ending = self._steps_done + seg.step_end_s.count_before(elapsed_s, False) + 1
        release = ending + 1 if self._after_next else ending
        n = self._block_steps
        if n > 1:
            boundary = self._block_end
            if ending > boundary:
                boundary += -(-(ending - boundary) // n) * n
            release = max(release, boundary)
        self._held.append((release, req))
        if seg.interruptible:
            self._cut(seg, release - self._steps_done)

    def _release_held(self, steps_done: int | None) -> None:
        """Hand the scheduler the held requests whose step has come (all with None)."""
        held, add = self._held, self.scheduler.add
        while held and (steps_done is None or held[0][0] <= steps_done):
            add(held.popleft()[1])

    # -- the loop -------------------------------------------------------------------
    def _on_plan_timer(self, event) -> None:
        if event is self._timer:
            self._plan(self.env.now)

    def _kick(self) -> None:
        """Plan at this instant, after the other events of the instant."""
        if not self._kick_pending:
            self._kick_pending = True
            self._timer = call_after(self.env, 0.0, self._plan_calls, self._timer)

    def _plan(self, now: float) -> None:
        self._kick_pending = False
        if self._seg is not None:
            return                        # a segment is running; its end plans the next
        plan = self.scheduler.next_segment(now)
        if self._held and (plan is None or isinstance(plan, float)):
            # nothing to run: an engine with no step in flight schedules them at once
            self._release_held(None)
            plan = self.scheduler.next_segment(now)
        if plan is None or isinstance(plan, float):
            if not self._idle and self._block_steps > 1:
                self._end_block(now)            # out of work within the block: it ends
            self._idle = True
        if plan is None:
            return
        if isinstance(plan, float):
            self._timer = call_after(self.env, plan - now, self._plan_calls, self._timer)
            return
        if self._idle:
            self._idle = False
            self._block_end = self._steps_done + self._block_steps     # a block starts
        self._seg = plan
        self._seg_start_s = now
        self._seg_end_s = now + plan.duration_s
        self._seg_steps = plan.num_steps
        self._timer = call_after(self.env, plan.duration_s, self._end_calls, self._timer)
        if plan.interruptible and self._delayed:
            # a fast-forward stops where a held request joins and where the block ends
            until = (self._block_end if self._block_steps > 1
                     else self._steps_done + plan.num_steps)
            if self._held:
                until = min(until, self._held[0][0])
            if until - self._steps_done < plan.num_steps:
                self._cut(plan, until - self._steps_done)

    def _finished_in_block(self, req: Request) -> None:
        self._block_done.append(req)

    def _end_block(self, now: float) -> None:
        """A multi-step block ended at ``now``: its tokens reach the client; the requests
        that finished in it are handed on, each first token seen at the end of its
        block."""
        ends = self._block_ends
        if not ends or ends[-1] != now:
            ends.append(now)
        done, self._block_done = self._block_done, []
        for req in done:
            req.finish_s = now
            if not req.carried_tokens:
                req.first_token_s = ends[bisect_left(ends, req.first_token_s)]
            self._pool_finish(req)

    def _cut(self, seg: Segment, steps: int | None = None) -> None:
        """End the running fast-forward after ``steps`` steps (default: once the step
        running now has ended), if that is before its planned end."""
        elapsed_s = self.env.now - self._seg_start_s
        if steps is None:
            steps = seg.step_end_s.count_before(elapsed_s, False) + 1
        if steps < self._seg_steps:
            end_offset_s = float(seg.step_end_s[steps - 1])
            self._seg_steps = steps
            self._seg_end_s = self._seg_start_s + end_offset_s
            self._timer = call_after(self.env, end_offset_s - elapsed_s, self._end_calls,
                                     self._timer)

    def _end_segment(self, event) -> None:
        if event is not self._timer:
            return                        # superseded by a cut, or the replica is gone
        seg, steps, start_s, end_s = self._seg, self._seg_steps, self._seg_start_s, self._seg_end_s
        self._seg = None
        now = self.env.now
        sched = self.scheduler
        sched.segment_ended(now)
        self._record(seg, steps, start_s, end_s)
        sched.finish_segment(seg, steps, start_s, end_s)
        if self._delayed:
            done = self._steps_done = self._steps_done + steps
            if self._block_end <= done:                     # the next block, back to back
                n = self._block_steps
                self._block_end += (done - self._block_end) // n * n + n
                if n > 1:
                    self._end_block(now)
            if self._held:
                self._release_held(done)
        self._plan(now)

    def kv_used_blocks(self) -> int:
        """KV blocks in use now, counting the steps of a fast-forward done so far."""
        seg = self._seg
        if seg is None or not seg.interruptible:
            return self.scheduler.kv.num_used_blocks
        done = seg.steps_ended_by(self.env.now - self._seg_start_s)
        return self.scheduler.kv_used_blocks_during(seg, done)

    def abandon(self) -> list[Request]:
        """The replica is gone (spot preemption): stop, and hand back its open
        requests with their progress lost."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._seg = None
        if self._block_done:
            self._end_block(self.env.now)       # what finished was seen as the engine went
        lost = self.open_requests()
        self._held.clear()
        self.scheduler.reset()
        for req in lost:
            req.restart()
        return lost

    def cut_off(self) -> None:
        """The run ends now: apply the steps of the running segment that are
        complete, and count the step in progress as busy time."""
        seg = self._seg
        if seg is None:
            if self._block_done:
                self._end_block(self.env.now)
            return
        start_s, now = self._seg_start_s, self.env.now
        done = seg.steps_ended_by(now - start_s)
        if seg.interruptible and 0 < done < self._seg_steps:
            end_s = start_s + seg.end_offset_s(done)
            self._record(seg, done, start_s, end_s)
            self.scheduler.finish_segment(seg, done, start_s, end_s)
            start_s = end_s
        self._seg = None
        self._timer = None
        if now > start_s:
            self.usage.add(start_s, now, 0, seg.num_seqs, 0.0, 0.0, 0.0)
        if self._block_done:
            self._end_block(now)                # the block is cut short with the run

    def _record(self, seg: Segment, num_steps: int, start_s: float, end_s: float) -> None:
        tokens, flops, moved = seg.totals(num_steps)
        self.usage.add(start_s, end_s, num_steps, seg.num_seqs, tokens, flops, moved)
        steps = self.recorder.steps
        if steps is not None:
            sched = self.scheduler
            prev = start_s
            for k in range(num_steps):
                end = start_s + float(seg.step_end_s[k])
                steps.append_row(StepRow(
                    pool=self.pool_code, replica=self.index, start_s=prev, end_s=end,
                    num_tokens=seg.tokens_of_step(k), num_seqs=seg.num_seqs,
                    kv_used_blocks=sched.kv_used_blocks_during(seg, k),
                    kv_total_blocks=self.kv_blocks_total))
                prev = end
