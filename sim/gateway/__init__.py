"""Gateway policy components: rate limits, spend budgets, client retries and
the per-pool waiting queue.

Everything here is pure and deterministic -- no SimPy; the caller passes the
simulated time ``now_s`` -- so each piece can be tested on hand-computed
numbers and reused by the gateway process.
"""
from sim.gateway.budget import PeriodBudget
from sim.gateway.fair_queue import FairQueue
from sim.gateway.retry import RetryPolicy, backoff_cap_s, retry_delay_s
from sim.gateway.token_bucket import TokenBucket

__all__ = ["FairQueue", "PeriodBudget", "RetryPolicy", "TokenBucket", "backoff_cap_s",
           "retry_delay_s"]
