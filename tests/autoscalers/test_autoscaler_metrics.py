"""The metrics a pool samples for its autoscaler: each a function of a PoolView."""
from __future__ import annotations

import typing


from simfactories import FakeReplica
from sim.autoscalers import metrics
from sim.autoscalers.metrics import METRICS, PoolView, sample
from sim.autoscalers.target import TargetConfig


class Ready(FakeReplica):
    def __init__(self, index, waiting, outstanding, used, total):
        super().__init__(index, outstanding, used, total)
        self.num_waiting = waiting


def test_each_metric_on_hand_counted_replicas():
    view = PoolView(queued=3, in_front_end=2, ready=[Ready(0, 1, 5, 30, 100),
                                                     Ready(1, 0, 2, 10, 100)])
    assert sample(view) == {"queue_per_replica": (3 + 1) / 2,
                            "inflight_per_replica": (3 + 2 + 5 + 2) / 2,
                            "kv_util": 40 / 200, "ready": 2.0}
    # no replica ready: the pool's totals
    assert sample(PoolView(4, 1, [])) == {"queue_per_replica": 4.0,
                                          "inflight_per_replica": 5.0, "kv_util": 0.0,
                                          "ready": 0.0}


def test_every_sampled_target_metric_has_its_function():
    choices = typing.get_args(TargetConfig.model_fields["metric"].annotation)
    sampled = [m for m in choices if m != "ttft_p95"]       # TTFTs come per request
    assert sampled and all(m in METRICS for m in sampled)


def test_a_metric_added_in_the_package_reaches_the_pools_sample(monkeypatch):
    """One function in sim/autoscalers/metrics.py: the pool's sample carries it."""
    import sim
    from simfactories import make_pool, make_scenario, poisson_stream
    monkeypatch.setitem(METRICS, "front_end", lambda view: float(view.in_front_end))
    seen = []
    original = metrics.sample

    def spy(view):
        out = original(view)
        seen.append(out)
        return out

    monkeypatch.setattr("sim.core.pool.sample", spy)
    sim.run(make_scenario(stream=poisson_stream(rate=5), duration=10, pool=make_pool(
        autoscaler={"type": "target", "metric": "queue_per_replica", "target": 4,
                    "max_replicas": 2})))
    assert seen and all("front_end" in s for s in seen)
