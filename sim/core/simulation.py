"""Build the components of a resolved scenario and run them on SimPy.

Arrivals are generated up front (columnar), then one process releases them
in time order into their pools; a closed-loop stream's requests are released
as its clients free up (one when another of the stream's requests ends). The
run ends when every request has reached a terminal status after the arrival
window, or at ``duration + drain``, when whatever is still open ends as
``unfinished``.
"""
from __future__ import annotations

import gc
import math
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import numpy as np
import simpy

from sim.config.inputs import DataFiles
from sim.config.resolve import Resolved
from sim.entities.block_keys import HashKeys, SessionKeys
from sim.core.checks import (RunRefused, check_request_count, check_servable,
                             check_step_times)
from sim.core.fleet import pool_parts
from sim.core.pool import Pool
from sim.entities.request import Request, Status
from sim.entities.wakeup import call_after, events_scheduled
from sim.core.work import REFUSED_PAUSE_S, check_work, closed_loop_paces
from sim.gateway.routes import Escalate, HandOff
from sim.gateway.service import Gateway
from sim.recording.accounts import RunAccount
from sim.recording.recorder import Recorder
from sim.workload import RequestArrivals, generate_arrivals

ProgressFn = Callable[[float, float], None]
# (every this many simulated seconds, ask this whether to give the run up)
Watch = tuple[float, Callable[["Simulation"], bool]]
GC_YOUNG_THRESHOLD = 100_000      # allocations between collections of the youngest generation


class Simulation:
    def __init__(self, resolved: Resolved, base_dir: DataFiles | Path) -> None:
        self.resolved = resolved
        scenario = resolved.scenario
        self.scenario = scenario
        self.env = simpy.Environment()
        self.recorder = Recorder(record_steps=scenario.record_steps,
                                 measured_from_s=scenario.warmup)
        workload_seq, pools_seq, self._gateway_seq = np.random.SeedSequence(scenario.seed).spawn(3)
        self.arrivals: RequestArrivals = generate_arrivals(
            scenario.workload, scenario.duration, workload_seq, base_dir,
            max_requests=scenario.max_requests)
        check_request_count(scenario, self.arrivals)
        pool_rngs = [np.random.default_rng(s) for s in pools_seq.spawn(len(resolved.pools))]
        team_weights = {t: cfg.weight for t, cfg in scenario.gateway.teams.items()}
        self.pools: dict[str, Pool] = {
            name: Pool(self.env, spec, pool_parts(spec, rng, team_weights, base_dir),
                       self.recorder, self._on_finish, self._on_reject, self._on_lost,
                       scenario.sample_interval, rng)
            for (name, spec), rng in zip(resolved.pools.items(), pool_rngs)}
        streams = scenario.workload.streams
        stream_cfgs = [streams[s] for s in self.arrivals.stream_names]
        default_pools = [resolved.stream_pool[s] for s in self.arrivals.stream_names]
        self._stream_meta = [(cfg.team, cfg.priority, self.pools[pool])
                             for cfg, pool in zip(stream_cfgs, default_pools)]
        self._stream_ids = [cfg.prompt_format == "token_ids" for cfg in stream_cfgs]
        check_step_times(scenario, self.pools)
        # what the run will cost: a known storm of refusals, or a closed loop past
        # max_requests at its pool's pace, refused; a long run's notice
        self.work_notice = check_work(
            scenario, self.arrivals.stream_index, self.arrivals.stream_names,
            closed_loop_paces(scenario, self.arrivals, self.pools, resolved.stream_pool))
        check_servable(scenario.gateway, self.arrivals, stream_cfgs, default_pools, self.pools)
        self.gateway: Gateway | None = None
        if scenario.gateway.active or any(c.retry or c.api_key for c in stream_cfgs):
            self.gateway = Gateway(self.env, scenario.gateway, stream_cfgs, default_pools,
                                   self.pools, np.random.default_rng(self._gateway_seq),
                                   self._reject_final)
        self._open = 0
        self._in_transit: dict[int, Request] = {}     # KV on its way to a decode pool
        self._arrivals_done = False
        self._cut_off = False                # the run is over: closed-loop clients stop
        # closed-loop streams: stream index -> (its unsent requests, in order; the
        # clients' think time)
        self._clients: dict[int, tuple[deque, float]] = {}
        timed = self.arrivals.num_timed
        for s, name in enumerate(self.arrivals.stream_names):
            arrival = streams[name].arrival
            if arrival.type == "closed":
                rows = np.flatnonzero(self.arrivals.stream_index[timed:] == s) + timed
                self._clients[s] = (deque(rows.tolist()), arrival.think_time)
        self._turns_waiting = 0              # sessions' next turns in their pause
        # closed-loop streams without a count, until their windows close
        self._open_ended = set(self.arrivals.refills or ())
        self._stop = self.env.event()
        self.end_s = 0.0
        self.abandoned_s: float | None = None   # when a watch ended the run early

    # -- request lifecycle ----------------------------------------------------
    def _terminal(self, req: Request, status: str) -> None:
        req.status = status
        self.recorder.record_request(req)
        self._open -= 1
        if req.stream_index in self._clients and not self._cut_off:
            # a closed-loop client is free: it sends its next request (after a round trip
            # when it was refused, so that a client refused at once still lets time move)
            s = req.stream_index
            pause = self._clients[s][1] + (REFUSED_PAUSE_S if status == Status.REJECTED else 0.0)
            call_after(self.env, pause, (lambda _e: self._send_closed(s),))
        if req.session_next >= 0 and status == Status.COMPLETED and not self._cut_off:
            # the conversation goes on: its next turn after the user's (or tool's) pause
            nxt = req.session_next
            self._turns_waiting += 1
            call_after(self.env, self._arr_think[nxt], (lambda _e: self._send_turn(nxt),))
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        if (self._open == 0 and self._arrivals_done and not self._turns_waiting
                and not self._stop.triggered):
            self._stop.succeed()

    def _send_turn(self, i: int) -> None:
        """A conversation's next turn, unless its stream's window has closed."""
        self._turns_waiting -= 1
        if not self._cut_off and self.env.now < self._stream_stop_s[self._arr_streams[i]]:
            self._arrive(i, self.env.now)
        self._maybe_stop()

    def _hand_off(self, req: Request, to: HandOff) -> None:
        """Disaggregated serving: the prompt's KV goes to the decode pool, which
        admits the request once it has arrived and blocks are free."""
        decode_pool, link = to.pool, to.link
        max_output = req.handoff[1]
        req.handoff = None
        source = self.pools[req.pool]
        # the prefill pool computed the prompt (less cache hits) and the first token
        req.earlier_pool = req.pool
        req.earlier_tokens = req.carried_tokens = req.computed_tokens
        kv_bytes = req.num_computed_tokens * source.spec.model.kv_bytes_per_token(
            source.cfg.kv_dtype)
        req.kv_transfer_s = link.link_latency + kv_bytes / link.link_bandwidth
        req.max_output_tokens = max_output
        req.num_blocks = 0
        req.prefix_blocks = 0
        req.last_token_s = req.first_token_s
        req.replica = -1
        req.pool = decode_pool
        self._in_transit[id(req)] = req
        call_after(self.env, req.kv_transfer_s,
                   (lambda _e: self._arrive_after_transfer(req, decode_pool),))

    def _arrive_after_transfer(self, req: Request, pool: str) -> None:
        del self._in_transit[id(req)]
        self.pools[pool].submit(req, front_end=False)     # its prompt went through one

    def _on_finish(self, req: Request) -> None:
        gateway = self.gateway
        if gateway is not None:
            after = gateway.when_done(req)
            if isinstance(after, HandOff):
                self._hand_off(req, after)
                return
            if isinstance(after, Escalate):
                # cascade: the small model's answer was not enough; the large one
                # starts over (the client waits through both)
                req.attempts += 1
                req.earlier_pool = req.pool      # its first attempt's work, then a fresh one
                req.earlier_tokens = req.computed_tokens
                req.carried_tokens = 0
                req.restart()
                req.pool = after.pool
                req.model = self.pools[after.pool].model_name
                self.pools[after.pool].submit(req)
                return
            gateway.left_pool(req)
        self._terminal(req, Status.COMPLETED)

    def _on_lost(self, req: Request) -> None:
        """A replica holding ``req`` was lost: the gateway (or client) tries again."""
        if self.gateway is not None:
            self.gateway.left_pool(req)
            self.gateway.refuse(req, "replica_lost", 0.0)
        else:
            req.attempts += 1
            self.pools[req.pool].submit(req)

    def _on_reject(self, req: Request, reason: str) -> None:
        """The pool refused ``req`` (too long, or shed from a full queue)."""
        if self.gateway is not None:
            self.gateway.left_pool(req)
            self.gateway.refuse(req, reason, 0.0)
        else:
            self._reject_final(req, reason)

    def _reject_final(self, req: Request, reason: str) -> None:
        req.reject_reason = reason
        req.finish_s = self.env.now
        self._terminal(req, Status.REJECTED)

    # -- processes ----------------------------------------------------------------
    def _start_arrivals(self) -> None:
        """Release the pre-generated arrivals in time order, one timeout each.

        A chain of wake-ups rather than a generator process: the hot path of
        a large run is one event per request.
        """
        arr = self.arrivals
        self._arr_times = arr.arrival_s[:arr.num_timed].tolist()
        self._arr_prompts = arr.prompt_tokens.tolist()
        self._arr_outputs = arr.output_tokens.tolist()
        self._arr_streams = arr.stream_index.tolist()
        self._arr_groups = arr.prefix_group.tolist()
        streams = self.scenario.workload.streams
        self._prefix = [(name, streams[name].prefix.tokens) if streams[name].prefix else None
                        for name in arr.stream_names]
        self._stream_stop_s = [min(self.scenario.duration, streams[name].end
                                   if streams[name].end is not None else math.inf)
                               for name in arr.stream_names]
        self._arr_blocks = arr.block_ids.tolist() if arr.block_ids is not None else None
        self._block_tokens = [getattr(streams[name].arrival, "id_block_tokens", None)
                              for name in arr.stream_names]
        if arr.session is not None:
            self._arr_sessions = arr.session.tolist()
            self._arr_think = arr.think_s.tolist()
            self._arr_next_turn = arr.next_turn.tolist()
            self._arr_turn = arr.turn.tolist()
        self._arr_next = 0
        self._release_calls = (self._release_due,)
        self._timed_done = False
        self._start_clients()
        self._release_due()

    def _arrive(self, i: int, now: float) -> None:
        """Request ``i`` of the run's arrivals reaches the gateway (or its pool) now."""
        s = self._arr_streams[i]
        team, priority, pool = self._stream_meta[s]
        req = Request(i, s, team, pool.model_name, pool.name, priority, now,
                      self._arr_prompts[i], self._arr_outputs[i])
        req.prompt_as_ids = self._stream_ids[s]
        prefix = self._prefix[s]
        if prefix is not None:
            req.prefix_group = f"{prefix[0]}#{self._arr_groups[i]}"
            req.prefix_tokens = prefix[1]
        if self.arrivals.session is not None and self._arr_sessions[i] >= 0:
            # a conversation's turn: its blocks are the conversation's, and routed by it
            conversation = f"{self.arrivals.stream_names[s]}~{self._arr_sessions[i]}"
            req.block_keys = SessionKeys(req.prefix_group, req.prefix_tokens, conversation,
                                         req.prompt_tokens + req.max_output_tokens)
            req.prefix_group = conversation
            req.session_next = self._arr_next_turn[i]
            req.session = self._arr_sessions[i]
            req.turn = self._arr_turn[i]
        if self._arr_blocks is not None and self._arr_blocks[i] is not None:
            # a traced prompt naming its blocks: shared exactly where the names match
            copy, ids = self._arr_blocks[i]
            scope = f"{self.arrivals.stream_names[s]}/{copy}"
            req.block_keys = HashKeys(scope, ids, self._block_tokens[s], req.prompt_tokens)
            # routed by its first two blocks: past a common system prompt, the conversation
            req.prefix_group = f"{scope}@{ids[:2]}"
        self._open += 1
        if self.gateway is None:
            pool.submit(req)
        else:
            self.gateway.arrive(req)

    def _release_due(self, _event=None) -> None:
        env = self.env
        now = env.now
        times = self._arr_times
        i = self._arr_next
        n = len(times)
        while i < n and times[i] <= now:
            self._arrive(i, times[i])
            i += 1
        self._arr_next = i
        if i < n:
            call_after(env, times[i] - now, self._release_calls)
            return
        self._timed_done = True
        self._check_arrivals_done()

    def _check_arrivals_done(self) -> None:
        if (self._timed_done and not any(c[0] for c in self._clients.values())
                and not self._open_ended):
            self._arrivals_done = True
            self._maybe_stop()

    # -- closed-loop streams ----------------------------------------------------------
    def _start_clients(self) -> None:
        """Each closed-loop stream's clients send their first requests at its start."""
        streams = self.scenario.workload.streams
        for s, (pending, _think_s) in self._clients.items():
            cfg = streams[self.arrivals.stream_names[s]]
            stop_s = min(self.scenario.duration, cfg.end if cfg.end is not None else math.inf)
            call_after(self.env, stop_s, (lambda _e, s=s: self._close_window(s),))
            send = (lambda _e, s=s: self._send_closed(s),)
            for _ in range(min(cfg.arrival.concurrency, len(pending))):
                call_after(self.env, cfg.start, send)

    def _send_closed(self, s: int) -> None:
        pending = self._clients[s][0]
        if not pending and s in self._open_ended and not self._cut_off:
            pending.extend(self._more_requests(s))
        if pending:
            self._arrive(pending.popleft(), self.env.now)
        self._check_arrivals_done()

    def _more_requests(self, s: int) -> range:
        """A chunk of new rows for an open-ended closed-loop stream (their lengths drawn
        now), refused past ``max_requests``."""
        first = len(self._arr_prompts)
        room = self.scenario.max_requests - first
        if room <= 0:
            name = self.arrivals.stream_names[s]
            raise RunRefused(
                ("workload", "streams", name, "arrival"),
                f"the clients of stream '{name}' send until its window ends, and would send "
                f"more than max_requests = {self.scenario.max_requests:,} requests: give "
                "arrival.requests, shorten the run or raise max_requests")
        prompt, output, group = self.arrivals.refills[s].draw(room)
        self._arr_prompts.extend(prompt)
        self._arr_outputs.extend(output)
        self._arr_streams.extend([s] * len(prompt))
        self._arr_groups.extend(group)
        if self.arrivals.session is not None:
            self._arr_sessions.extend([-1] * len(prompt))
            self._arr_turn.extend([-1] * len(prompt))
        if self._arr_blocks is not None:
            self._arr_blocks.extend([None] * len(prompt))
        return range(first, first + len(prompt))

    def _close_window(self, s: int) -> None:
        """The stream's window ended: its clients send nothing more."""
        self._clients[s][0].clear()
        self._open_ended.discard(s)
        self._check_arrivals_done()

    def _sample(self):
        env = self.env
        interval = self.scenario.sample_interval
        samples = self.recorder.samples
        pools = list(self.pools.values())
        while True:
            yield env.timeout(interval)
            for pool in pools:
                samples.append_row(pool.snapshot(env.now))

    def _cap(self, limit_s: float):
        yield self.env.timeout(limit_s)
        if not self._stop.triggered:
            self._stop.succeed()

    def _watch(self, every_s: float, give_up: Callable[["Simulation"], bool]):
        """Ask ``give_up`` every ``every_s`` of simulated time whether the run is worth
        finishing; when it says no, the run ends there (``abandoned_s``)."""
        while True:
            yield self.env.timeout(every_s)
            if not self._stop.triggered and give_up(self):
                self.abandoned_s = self.env.now
                self._stop.succeed()
                return

    def _progress(self, fn: ProgressFn, limit_s: float):
        tick = max(limit_s / 500.0, self.scenario.sample_interval)
        while True:
            fn(self.env.now, limit_s)
            yield self.env.timeout(tick)

    # -- run -------------------------------------------------------------------------
    def account(self) -> RunAccount:
        """What the results are built from, once the run has ended."""
        return RunAccount(
            scenario=self.scenario, end_s=self.end_s,
            stream_names=tuple(self.arrivals.stream_names),
            events_scheduled=self.events_scheduled, wall_s=getattr(self, "wall_s", 0.0),
            setup_s=getattr(self, "setup_s", 0.0), recorder=self.recorder,
            pools={name: pool.account(self.end_s) for name, pool in self.pools.items()})

    def run(self, progress: ProgressFn | None = None, watch: Watch | None = None
            ) -> "Simulation":
        """Run to the end (``watch``: every ``every_s``, a caller's test that may end the
        run early as not worth finishing)."""
        env = self.env
        limit_s = self.scenario.duration + self.scenario.drain
        self._start_arrivals()
        env.process(self._sample())
        env.process(self._cap(limit_s))
        if progress is not None:
            env.process(self._progress(progress, limit_s))
        if watch is not None:
            env.process(self._watch(*watch))
        with fewer_gc_passes():
            env.run(until=self._stop)
            if env.now < self.scenario.duration and self.abandoned_s is None:
                # everything finished early: the fleet is still there (and billed), and
                # the time series goes on, until the end of the arrival window
                env.run(until=self.scenario.duration)
        self.events_scheduled = events_scheduled(env)
        self.end_s = env.now if self.abandoned_s is not None else \
            max(env.now, self.scenario.duration)
        for pool in self.pools.values():
            for replica in pool.replicas:
                replica.cut_off()
        still_open = [req for pool in self.pools.values() for req in pool.open_requests()]
        still_open += list(self._in_transit.values())
        if self.gateway is not None:
            still_open += list(self.gateway.waiting_to_retry.values())
        self._cut_off = True
        for req in still_open:
            self._terminal(req, Status.UNFINISHED)
        if progress is not None:
            progress(limit_s, limit_s)
        return self


@contextmanager
def fewer_gc_passes(young_threshold: int = GC_YOUNG_THRESHOLD):
    """Run with the cyclic collector's youngest generation collected every
    ``young_threshold`` allocations instead of Python's 700, and the older
    ones correspondingly rarely; restored afterwards.

    The event loop allocates and frees (by reference count) millions of
    short-lived objects, and each full collection walks every live object of
    a large fleet: with the defaults a 512-replica run spends about a tenth
    of its time in the collector. Cycles are still collected, only in fewer
    passes."""
    before = gc.get_threshold()
    gc.set_threshold(young_threshold, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run_resolved(resolved: Resolved, base_dir: DataFiles | Path,
                 progress: ProgressFn | None = None) -> Simulation:
    t0 = time.perf_counter()
    sim = Simulation(resolved, base_dir).run(progress)
    sim.wall_s = time.perf_counter() - t0
    return sim
