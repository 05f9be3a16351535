"""The gateway: between the clients and the pools.

For each request (and each retry): authenticate the API key (401 when
unknown or revoked: no GPU time is spent), lower the priority to the team's
ceiling, resolve the model name (aliases, served names, per-team access),
check the team's limits (concurrency, budget, requests/min and tokens/min
token buckets) and either pass the request to a pool (weighted split or
cascade) or answer 429 with a retry-after. A client whose stream has a
retry policy tries again after exponential backoff with jitter, so retries
feed back into the load; otherwise the request ends rejected with the
reason. Requests shed by a full pool queue (503) or lost with a spot
replica are retried under the same policy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from sim.config.gateway import GatewayConfig, ServedModelConfig, TeamConfig
from sim.config.workload import StreamConfig
from sim.gateway.budget import PeriodBudget
from sim.gateway.retry import retry_delay_s
from sim.gateway.routes import Next, Route, build_route
from sim.gateway.token_bucket import TokenBucket
from sim.entities.request import Request
from sim.entities.wakeup import call_after

RETRYABLE = {"rate_limited_rpm", "rate_limited_tpm", "concurrency_limit", "budget_exhausted",
             "shed_queue_full", "replica_lost"}


@dataclass
class _TeamState:
    cfg: TeamConfig
    rpm: TokenBucket | None
    tpm: TokenBucket | None
    budget: PeriodBudget | None
    in_flight: int = 0


def _team_state(cfg: TeamConfig) -> _TeamState:
    rpm = TokenBucket(cfg.requests_per_min / 60.0, cfg.requests_per_min) \
        if cfg.requests_per_min else None
    tpm = TokenBucket(cfg.tokens_per_min / 60.0, cfg.tokens_per_min) \
        if cfg.tokens_per_min else None
    budget = None
    if cfg.budget is not None:
        limit = cfg.budget.tokens if cfg.budget.tokens is not None else cfg.budget.usd
        budget = PeriodBudget(limit, cfg.budget.period)
    return _TeamState(cfg, rpm, tpm, budget)


class Gateway:
    def __init__(self, env: simpy.Environment, cfg: GatewayConfig,
                 streams: list[StreamConfig], default_route: list[str],
                 pools: dict, rng: np.random.Generator,
                 reject: Callable[[Request, str], None]) -> None:
        self.env = env
        self.cfg = cfg
        self.streams = streams
        self.default_route = default_route        # stream index -> pool name
        self.pools = pools
        self.rng = rng
        self._reject = reject
        self.teams = {name: _team_state(t) for name, t in cfg.teams.items()}
        # clients backing off before their next try: still open, in no pool
        self.waiting_to_retry: dict[int, Request] = {}
        # the served model a stream asks for (team access, prices) and where its requests
        # go (a stream that names its pool goes there, whatever the model's route)
        self._served_names = [cfg.served_name(s.model) or "" for s in streams]
        self._served: list[ServedModelConfig | None] = [
            cfg.models.get(name) for name in self._served_names]
        self._routes: list[Route] = [
            build_route(cfg.route_for(s.model, s.pool), pool)
            for s, pool in zip(streams, default_route)]

    # -- arrival -------------------------------------------------------------------
    def arrive(self, req: Request) -> None:
        stream = self.streams[req.stream_index]
        now = self.env.now
        req.api_key = stream.api_key or ""
        req.served_model = self._served_names[req.stream_index]
        if self.cfg.keys:
            key = self.cfg.keys.get(stream.api_key) if stream.api_key else None
            if key is None or (key.revoked_at is not None and now >= key.revoked_at):
                self._reject(req, "unauthorized")
                return
            req.team = key.team
        team = self.teams.get(req.team)
        if team is not None and team.cfg.max_priority is not None:
            req.priority = max(req.priority, team.cfg.max_priority)
        served = self._served[req.stream_index]
        if served is not None and served.teams is not None and req.team not in served.teams:
            self._reject(req, "model_not_allowed")
            return
        if team is not None:
            refusal = self._admit(team, req, served, now)
            if refusal is not None:
                self.refuse(req, *refusal)
                return
            team.in_flight += 1
            req.holds_slot = True
        self._send(req, self._routes[req.stream_index].first_pool(req, self.rng))

    def _cost_estimate(self, req: Request, served: ServedModelConfig | None,
                       budget_in_usd: bool) -> float:
        if not budget_in_usd:
            return float(req.prompt_tokens + req.max_output_tokens)
        if served is None:
            return 0.0
        return (req.prompt_tokens * served.usd_per_million_input_tokens
                + req.max_output_tokens * served.usd_per_million_output_tokens) / 1e6

    def _admit(self, team: _TeamState, req: Request, served, now: float
               ) -> tuple[str, float] | None:
        """None when the request may pass (limits charged), else (reason, retry-after)."""
        cfg = team.cfg
        if cfg.max_concurrency is not None and team.in_flight >= cfg.max_concurrency:
            return "concurrency_limit", math.inf
        if team.budget is not None:
            cost = self._cost_estimate(req, served, cfg.budget.usd is not None)
            if team.budget.spent(now) + cost > team.budget.limit:
                return "budget_exhausted", team.budget.try_spend(now, cost)
        if team.rpm is not None:
            wait = team.rpm.try_take(now, 1.0)
            if wait > 0:
                return "rate_limited_rpm", wait
        if team.tpm is not None:
            wait = team.tpm.try_take(now, float(req.prompt_tokens + req.max_output_tokens))
            if wait > 0:
                if team.rpm is not None:
                    team.rpm.refund(1.0)
                return "rate_limited_tpm", wait
        if team.budget is not None:
            team.budget.charge(now, self._cost_estimate(req, served, cfg.budget.usd is not None))
        return None

    def _send(self, req: Request, pool: str) -> None:
        req.pool = pool
        req.model = self.pools[pool].model_name
        self.pools[pool].submit(req)

    # -- after the pool ---------------------------------------------------------------
    def when_done(self, req: Request) -> Next:
        """The pool ``req.pool`` finished ``req``: what its route does next (a hand-off to
        the decode pool, an escalation to the cascade's large model, or nothing)."""
        return self._routes[req.stream_index].when_done(req, self.rng)

    def left_pool(self, req: Request) -> None:
        """``req`` left its pool (done, refused there, or lost): free its team slot."""
        if req.holds_slot:
            req.holds_slot = False
            self.teams[req.team].in_flight -= 1

    def refuse(self, req: Request, reason: str, retry_after_s: float) -> None:
        """A 429/503 for ``req``: retry under the stream's policy, or reject."""
        policy = self.streams[req.stream_index].retry
        delay = None
        if policy is not None and reason in RETRYABLE:
            delay = retry_delay_s(policy, req.attempts, retry_after_s, self.rng)
            if delay is not None and not math.isfinite(delay):
                delay = None
        self._routes[req.stream_index].undo(req)       # e.g. a disaggregated split
        if delay is None:
            self._reject(req, reason)
            return
        req.restart()
        req.attempts += 1
        self.waiting_to_retry[id(req)] = req
        call_after(self.env, delay, (lambda _e: self._retry(req),))

    def _retry(self, req: Request) -> None:
        del self.waiting_to_retry[id(req)]
        self.arrive(req)
