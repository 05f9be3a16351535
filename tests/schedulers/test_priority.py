"""Priority scheduling inside a replica."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import sim
from sim.config.scenario import Scenario
from sim.entities.request import Request
from sim.schedulers.waiting import PriorityQueue

ROOT = Path(__file__).resolve().parents[2]


def run(**sched):
    base = sim.load_scenario(ROOT / "scenarios" / "priority-scheduling.yaml")
    data = base.model_dump()
    data["pools"]["main"]["scheduler"].update(sched)
    return sim.run(Scenario.model_validate(data)).requests


def p99_ttft(req, priority: int) -> float:
    done = req[(req.priority == priority) & (req.status == "completed")]
    return float(np.percentile(done.ttft_s, 99))


def test_top_class_keeps_its_ttft_slo_under_overload():
    """At ~1.5x capacity the priority policy keeps interactive p99 TTFT under
    1 s (and never preempts it); FCFS lets it queue behind everyone."""
    prio, fcfs = run(policy="priority"), run(policy="fcfs")
    assert p99_ttft(prio, 0) < 1.0
    assert prio[prio.priority == 0].preemptions.sum() == 0
    assert p99_ttft(fcfs, 0) > 20 * p99_ttft(prio, 0)
    assert p99_ttft(prio, 2) > p99_ttft(prio, 1) > p99_ttft(prio, 0)


def test_ageing_lets_the_lowest_class_through():
    """With ageing the batch class waits less than under strict priority."""
    strict, aged = run(policy="priority"), run(policy="priority", priority_aging=30)
    mean_queue = lambda req: req[req.priority == 2].queue_s.mean()  # noqa: E731
    assert mean_queue(aged) < mean_queue(strict)


def test_priority_queue_orders_by_priority_then_arrival_and_ages():
    """Lower value first, ties by arrival; with ageing an old request of a
    lower class overtakes a fresh one of a higher class."""
    def req(rid, prio, t):
        return Request(rid, 0, "t", "m", "p", prio, t, 10, 10)

    q = PriorityQueue()
    for r in (req(1, 1, 0.0), req(2, 0, 5.0), req(3, 1, 1.0), req(4, 0, 2.0)):
        q.append(r)
    assert [q.popleft().request_id for _ in range(4)] == [4, 2, 1, 3]
    aged = PriorityQueue(aging_s=10.0)
    aged.append(req(1, 1, 0.0))               # waited long: key 1*10 + 0 = 10
    aged.append(req(2, 0, 15.0))              # fresh, higher class: key 15
    assert aged[0].request_id == 1
