"""A pool: replicas of one model on one GPU kind, behind a router and a queue.

The pool turns away requests that can never be served here (too long for
the model or the KV cache), queues the rest and dispatches them to ready
replicas. Replicas have a life cycle:

    requested --cold start--> ready --scale in--> draining --empty--> released
                                    \\--spot preemption--> released (work lost)

A replica is billed from the moment it is requested until it is released;
a draining replica takes no new requests and finishes the ones it has.
Without ``queue.max_outstanding_per_replica`` requests go to a replica at
once (each replica queues its own, like a vLLM server); with it, they wait
in the pool's queue (bounded, with fair queueing between teams) until a
replica has room.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from sim.autoscalers.metrics import PoolView, sample
from sim.config.resolve import ResolvedPool
from sim.core.fleet import PoolParts
from sim.entities.kv import KvCacheManager
from sim.core.replica import DRAINING, READY, STARTING, Replica
from sim.entities.request import Request
from sim.entities.wakeup import call_after
from sim.recording.accounts import PoolAccount
from sim.recording.recorder import PoolSample, Recorder
from sim.recording.usage import PoolUsage
from sim.schedulers.base import Scheduler


class Pool:
    def __init__(self, env: simpy.Environment, spec: ResolvedPool, parts: PoolParts,
                 recorder: Recorder, on_finish: Callable[[Request], None],
                 on_reject: Callable[[Request, str], None],
                 on_lost: Callable[[Request], None],
                 interval_s: float, rng: np.random.Generator) -> None:
        self.env = env
        self.spec = spec
        self.cfg = spec.cfg
        self.name = spec.name
        self.model_name = spec.model.name
        self.code = recorder.pools.code(spec.name)
        self.recorder = recorder
        self.cost_model = parts.cost_model
        self.usage = PoolUsage(interval_s)
        self._serving = 0                        # ready + draining replicas
        self.rng = rng                           # (spot preemptions)
        self._on_finish = on_finish
        self._on_reject = on_reject
        self._on_lost = on_lost
        self.router = parts.router
        self.queue = parts.queue
        self.max_outstanding = self.cfg.queue.max_outstanding_per_replica
        # a request's way through the engine's front end before it reaches the queue, and
        # its tokens' hop to the client
        self.front_end = parts.front_end
        self._token_hop_s = parts.front_end.token_hop_s
        self._join_after_next = parts.join_after_next
        self._multi_step = parts.multi_step
        self._in_front_end: dict[int, Request] = {}
        self._new_scheduler = parts.new_scheduler
        self.replicas: list[Replica] = []        # every replica not yet released
        self.ready: list[Replica] = []           # the router's choices, by index
        self._by_index: dict[int, Replica] = {}
        self.cold_start_s = (self.cfg.cold_start.provisioning
                             + spec.kv.weight_bytes_per_gpu / self.cfg.cold_start.load_bandwidth)
        self.released_billing_s: list[tuple[float, float]] = []   # (requested, released)
        self.replicas_max = 0
        self._next_index = 0
        self._queue_seq = 0
        self._servable: int | None = None        # longest prompt + output a replica serves
        self.autoscaler = parts.autoscaler
        for _ in range(self.cfg.replicas):
            self._make_ready(self._new_replica())
        if self.autoscaler is not None:
            env.process(self._autoscale())

    # -- replica life cycle ------------------------------------------------------------
    def _new_replica(self) -> Replica:
        kv = KvCacheManager(self.spec.kv.num_blocks, self.spec.kv.block_size_tokens,
                            prefix_caching=self.cfg.prefix_caching)
        scheduler = self._new_scheduler(kv, self._finished, self.recorder.gaps)
        replica = Replica(self.env, self.code, self._next_index, scheduler, self.recorder,
                          self.usage, self._join_after_next, self._multi_step)
        self._next_index += 1
        self.replicas.append(replica)
        self._by_index[replica.index] = replica
        self.replicas_max = max(self.replicas_max, len(self.replicas))
        return replica

    def _make_ready(self, replica: Replica) -> None:
        if not replica.become_ready():
            return                               # cancelled while starting
        self.ready.append(replica)
        self._serving_changed(+1)
        self.router.on_ready(replica)
        if self.cfg.spot is not None and self.cfg.spot.preemptions_per_hour > 0:
            delay_s = self.rng.exponential(3600.0 / self.cfg.spot.preemptions_per_hour)
            call_after(self.env, delay_s, (lambda _e, r=replica: self._preempt(r),))
        self._dispatch()

    def _start(self) -> None:
        replica = self._new_replica()
        call_after(self.env, self.cold_start_s, (lambda _e, r=replica: self._make_ready(r),))

    def _serving_changed(self, delta: int) -> None:
        self._serving += delta
        self.usage.serving_changed(self.env.now, self._serving)

    def _leave_ready(self, replica: Replica) -> None:
        self.ready.remove(replica)
        self.router.on_leave(replica)

    def _release(self, replica: Replica) -> None:
        if replica.state in (READY, DRAINING):
            self._serving_changed(-1)
        replica.release()
        self.released_billing_s.append((replica.requested_s, self.env.now))
        self.replicas.remove(replica)
        del self._by_index[replica.index]

    def _drain(self, replica: Replica) -> None:
        if replica.state == STARTING:
            self._release(replica)               # never served: stop paying at once
            return
        self._leave_ready(replica)
        replica.start_draining()
        if replica.num_outstanding == 0:
            self._release(replica)

    def _preempt(self, replica: Replica) -> None:
        """A spot replica is taken back: its requests are lost and retried."""
        if replica.state not in (READY, DRAINING):
            return
        if replica.state == READY:
            self._leave_ready(replica)
        lost = replica.abandon()
        self._release(replica)
        for req in lost:
            self.router.on_done(replica.index)
            self._on_lost(req)

    def billed_gpu_seconds(self, now_s: float) -> float:
        """GPU-seconds billed up to ``now_s``: each released replica's billed interval,
        then the live ones' so far."""
        gpus = self.spec.gpus_per_replica
        released = sum((end_s - start_s) * gpus for start_s, end_s in self.released_billing_s)
        live = sum(now_s - r.requested_s for r in self.replicas) * gpus
        return released + live

    def billing_intervals(self, now_s: float) -> tuple[tuple[float, float], ...]:
        """Each replica's billed interval, (requested, released or ``now_s``), in the order
        they were released, then the live ones."""
        live = [(r.requested_s, now_s) for r in self.replicas]
        return tuple(self.released_billing_s + live)

    def account(self, end_s: float) -> PoolAccount:
        """What the results need of this pool once the run has ended at ``end_s``."""
        spec, cost = self.spec, self.cost_model
        return PoolAccount(
            model=spec.model.name, hardware=spec.hardware.name, tp=spec.cfg.tp, pp=spec.cfg.pp,
            weight_dtype=spec.cfg.weight_dtype, kv_dtype=spec.cfg.kv_dtype,
            cost_model=cost.label, engine=spec.engine.label, gpus_per_replica=spec.gpus_per_replica,
            price_per_gpu_hour=spec.price_per_gpu_hour, kv_blocks_per_replica=spec.kv.num_blocks,
            billed_gpu_s=self.billed_gpu_seconds(end_s),
            billing_intervals_s=self.billing_intervals(end_s), replicas_max=self.replicas_max,
            peak_flops_per_gpu=cost.peak_flops_per_gpu,
            peak_bytes_per_s_per_gpu=cost.peak_bytes_per_s_per_gpu, usage=self.usage)

    # -- requests ------------------------------------------------------------------------
    def _finished(self, req: Request) -> None:
        hop = self._token_hop_s
        if hop:
            # the client sees its tokens a hop after their steps; a request whose prompt
            # was computed in another pool got its first token from there
            req.finish_s += hop
            if not req.carried_tokens:
                req.first_token_s += hop
        self.router.on_done(req.replica)
        replica = self._by_index.get(req.replica)
        self._on_finish(req)
        if self.autoscaler is not None and not np.isnan(req.first_token_s):
            self.autoscaler.observe_ttft(self.env.now, req.first_token_s - req.arrival_s)
        if replica is not None and replica.state == DRAINING and replica.num_outstanding == 0:
            self._release(replica)
        if self.queue:
            self._dispatch()

    def servable_tokens(self) -> int:
        """The longest prompt + output a replica of this pool can serve."""
        servable = self._servable
        if servable is None:
            servable = self._servable = self._probe().servable_tokens()
        return servable

    def binding_limit(self) -> tuple[str, int]:
        """(reason, tokens) of the limit that sets :meth:`servable_tokens`."""
        return self._probe().binding_limit()

    def submit(self, req: Request, front_end: bool = True) -> None:
        """A request for this pool: turned away at once when no replica could ever serve
        it, else through the engine's front end (``front_end``: a constant and a cost per
        prompt token, none for a prompt sent as token ids; skipped by a request whose
        prefill ran elsewhere) to a replica or the queue."""
        if req.prompt_tokens + req.max_output_tokens > self.servable_tokens():
            self._on_reject(req, self.reject_reason(req))
            return
        if front_end and self.front_end.active:
            self._in_front_end[id(req)] = req
            call_after(self.env,
                       self.front_end.entry_s(0 if req.prompt_as_ids else req.prompt_tokens),
                       (lambda _e: self._through_front_end(req),))
            return
        self._enqueue(req)

    def _through_front_end(self, req: Request) -> None:
        del self._in_front_end[id(req)]
        self._enqueue(req)

    def _enqueue(self, req: Request) -> None:
        if self.max_outstanding is None and self.ready and not self.queue:
            self.router.pick(req, self.ready, None).submit(req)
            return
        self._queue_seq += 1
        for shed in self.queue.push(req, team=req.team, priority=req.priority,
                                    cost=req.prompt_tokens + req.max_output_tokens,
                                    seq=self._queue_seq):
            self._on_reject(shed, "shed_queue_full")
        self._dispatch()

    def reject_reason(self, req: Request) -> str | None:
        return self._probe().reject_reason(req)

    def most_sequences(self) -> int:
        """The most sequences one step of a replica holds (its scheduler's batch limit)."""
        return self._probe().most_sequences()

    def _probe(self) -> Scheduler:
        """A scheduler of the pool's kind: every replica has the same limits."""
        return self.replicas[0].scheduler if self.replicas else self._new_probe()

    def _new_probe(self) -> Scheduler:
        kv = KvCacheManager(self.spec.kv.num_blocks, self.spec.kv.block_size_tokens)
        return self._new_scheduler(kv, self._finished, None)   # it serves no request

    def _has_room(self, replica: Replica) -> bool:
        return self.max_outstanding is None or replica.num_outstanding < self.max_outstanding

    def _dispatch(self) -> None:
        while self.queue and self.ready:
            replica = self.router.pick(self.queue.peek(), self.ready, self._has_room)
            if replica is None:
                return
            replica.submit(self.queue.pop())

    # -- autoscaling -----------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """The autoscaler's sample (``sim/autoscalers/metrics.py`` says what each is)."""
        return sample(PoolView(len(self.queue), len(self._in_front_end), self.ready))

    def _autoscale(self):
        scaler = self.autoscaler
        env = self.env
        while True:
            yield env.timeout(scaler.tick_s)
            now = env.now
            scaler.observe(now, self.metrics())
            starting = [r for r in self.replicas if r.state == STARTING]
            current = len(starting) + len(self.ready)
            desired = scaler.desired(now, current, len(self.ready))
            for _ in range(desired - current):
                self._start()
            surplus = current - desired
            for replica in reversed(starting):           # cancel pending starts first
                if surplus <= 0:
                    break
                self._drain(replica)
                surplus -= 1
            while surplus > 0 and self.ready:
                victim = min(reversed(self.ready), key=lambda r: r.num_outstanding)
                self._drain(victim)
                surplus -= 1

    # -- state for sampling ---------------------------------------------------------------
    def snapshot(self, now_s: float) -> PoolSample:
        queued, running, used, total = len(self.queue), 0, 0, 0
        starting = draining = 0
        for r in self.replicas:
            if r.state == STARTING:
                starting += 1
                continue
            if r.state == DRAINING:
                draining += 1
            queued += r.num_waiting
            running += r.num_running
            used += r.kv_used_blocks()
            total += r.kv_blocks_total
        return PoolSample(time_s=now_s, pool=self.code, replicas=len(self.replicas),
                          ready=len(self.ready), starting=starting, draining=draining,
                          queued=queued, running=running, kv_used_blocks=used,
                          kv_total_blocks=total)

    def open_requests(self):
        for r in self.replicas:
            yield from r.open_requests()
        yield from list(self.queue)
        yield from list(self._in_front_end.values())
