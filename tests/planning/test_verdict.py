"""Statistical SLO verdicts: sequential replication until an interval clears its target."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.config.slos import Slo
from sim.planning.verdict import Confidence, decide, judge

TARGET = 1.0


def normal_sampler(rng: np.random.Generator, means: dict[str, float], sd: float):
    """Replication i's metrics: each a normal draw around its true mean."""
    def sample(i: int):
        return {k: float(rng.normal(m, sd)) for k, m in means.items()}, i
    return sample


def wrong_share(true_mean: float, slos: list[Slo], trials: int, sd: float = 0.1,
                level: float = 0.95, metric_means: dict | None = None) -> tuple[float, float]:
    """Over ``trials`` independent trials: the share that ended in a sure verdict that is
    wrong (what the level bounds), and the share decided surely."""
    rng = np.random.default_rng(7)
    means = metric_means or {s.metric: true_mean for s in slos}
    truth = all(means[s.metric] >= s.target if s.higher_is_better
                else means[s.metric] <= s.target for s in slos)
    sure = wrong = 0
    for _ in range(trials):
        v = judge(normal_sampler(rng, means, sd), slos, Confidence(level, 12))
        if v.certain:
            sure += 1
            wrong += v.ok != truth
    return wrong / trials, sure / trials


@pytest.mark.parametrize("true_mean", [0.9, 0.97, 1.02, 1.05, 1.15])
def test_sure_verdicts_are_wrong_no_more_often_than_the_level_allows(true_mean):
    """Over 2,000 trials whose metric is truly just below or above its target, at most
    5% end in a sure verdict at 95% that is wrong; far from it, most trials are sure."""
    slos = [Slo("ttft_p99", TARGET)]
    wrong, sure = wrong_share(true_mean, slos, 2000)
    assert wrong <= 0.05
    if abs(true_mean - TARGET) >= 0.1:
        assert sure > 0.9


def test_with_several_slos_a_sure_miss_is_still_wrong_at_most_five_percent_of_the_time():
    """Three SLOs all truly met by a hair: any one of them may call a miss, and the
    Bonferroni share per SLO keeps wrong sure misses within 5%."""
    slos = [Slo("ttft_p99", TARGET), Slo("tpot_p99", TARGET), Slo("e2e_p99", TARGET)]
    wrong, _ = wrong_share(0, slos, 2000, metric_means={s.metric: 0.98 for s in slos})
    assert wrong <= 0.05


def test_a_clear_verdict_takes_the_first_look_and_a_close_one_the_cap():
    """Far from the target three replications decide; at the target it runs to the cap,
    uncertain, and says so."""
    slos = [Slo("ttft_p99", TARGET)]
    rng = np.random.default_rng(1)
    far = judge(normal_sampler(rng, {"ttft_p99": 0.5}, 0.05), slos, Confidence(0.95, 12))
    assert (far.ok, far.certain, far.replications) == (True, True, 3)
    assert far.low["ttft_p99"] < far.estimate["ttft_p99"] < far.high["ttft_p99"] < TARGET
    close = judge(normal_sampler(rng, {"ttft_p99": 1.0}, 0.05), slos, Confidence(0.95, 12))
    assert (close.certain, close.replications) == (False, 12)
    assert close.label in ("met?", "missed?")


def test_looks_start_at_three_and_double_up_to_the_cap():
    assert Confidence(0.95, 12).looks() == [3, 6, 12]
    assert Confidence(0.95, 10).looks() == [3, 6, 10]
    assert Confidence(0.95, 3).looks() == [3]
    with pytest.raises(ValueError):
        Confidence(0.95, 2)
    with pytest.raises(ValueError):
        Confidence(1.0, 12)


def test_one_seed_gives_the_point_verdict_and_no_interval():
    v = judge(lambda i: ({"ttft_p99": 0.9}, "summary"), [Slo("ttft_p99", TARGET)], None)
    assert (v.ok, v.certain, v.replications, v.first, v.low) == (True, None, 1, "summary", {})
    assert v.label == "met"


def test_infinite_in_every_replication_is_a_sure_miss_in_some_an_unsure_one():
    """A percentile that does not exist (too many requests never completed) is infinite:
    in every replication the miss is sure, in some of them only the estimate's."""
    slos = [Slo("ttft_p99", TARGET)]
    all_inf = decide([{"ttft_p99": math.inf}] * 3, slos, 0.95, 3)
    assert (all_inf.ok, all_inf.certain) == (False, True)
    some = decide([{"ttft_p99": math.inf}, {"ttft_p99": 0.1}, {"ttft_p99": 0.1}], slos,
                  0.95, 3)
    assert (some.ok, some.certain) == (False, False)


def test_attainment_is_met_from_below_its_target_side():
    """Attainment is better high: a sure pass needs the interval's low end above it."""
    slos = [Slo("attainment", 0.9)]
    high = decide([{"attainment": a} for a in (0.99, 0.98, 0.985)], slos, 0.95, 3)
    low = decide([{"attainment": a} for a in (0.5, 0.52, 0.49)], slos, 0.95, 3)
    assert (high.ok, high.certain, low.ok, low.certain) == (True, True, False, True)


def test_replication_i_gets_the_ith_seed_after_the_scenarios():
    """judge asks for replications 0, 1, 2, ... in order and keeps the first's extra."""
    asked = []

    def sample(i):
        asked.append(i)
        return {"ttft_p99": 0.1 + 0.01 * i}, f"run {i}"
    v = judge(sample, [Slo("ttft_p99", TARGET)], Confidence(0.95, 12))
    assert asked == [0, 1, 2] and v.first == "run 0"
