"""Statistical SLO verdicts: a trial replicated over independent seeds until each SLO's
confidence interval clears its target, or a cap on the replications is reached.

One simulation of a finite window gives each SLO metric (a TTFT p99, an attainment)
as a random figure: near the target the verdict flips with the seed. Here a trial is
run with seeds ``seed, seed + 1, ...`` and looked at after ``min_replications``, then
each time the replications have doubled, up to ``max_replications``. At each look the
metric's mean over the replications gets a Student-t bound on each side:

- *met* with confidence when every SLO's bound on its bad side clears the target;
- *missed* with confidence when some SLO's bound on its good side is past the target;
- otherwise the trial goes on; at the cap the verdict is the point estimate's, marked
  uncertain.

The error rate stays within ``1 - level`` by Bonferroni's inequality: each of the
``k`` looks tests at ``(1 - level) / k``, and the "missed" side, which any one SLO can
decide, at ``(1 - level) / (k m)`` for ``m`` SLOs. A metric that is infinite in a
replication (too many requests never completed for the percentile to exist) makes the
mean infinite: infinite in every replication is a certain miss, in some of them an
uncertain one.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sim.config.slos import Slo
from sim.output.slo import met

# replications a confident verdict starts from (with 2 the t quantile is uselessly wide)
MIN_REPLICATIONS = 3
DEFAULT_MAX_REPLICATIONS = 12


@dataclass(frozen=True)
class Confidence:
    """How sure a verdict must be, and how many replications it may take."""
    level: float = 0.95
    max_replications: int = DEFAULT_MAX_REPLICATIONS
    min_replications: int = MIN_REPLICATIONS

    def __post_init__(self) -> None:
        if not 0.5 <= self.level < 1:
            raise ValueError(f"confidence {self.level!r}: a level in [0.5, 1), e.g. 0.95")
        if not 2 <= self.min_replications <= self.max_replications:
            raise ValueError(f"replications {self.min_replications}..{self.max_replications}:"
                             " at least 2, the cap no lower than the start")

    def looks(self) -> list[int]:
        """The replication counts at which the verdict is looked at: the start, doubled
        each time, and the cap."""
        out, r = [], self.min_replications
        while r < self.max_replications:
            out.append(r)
            r *= 2
        return out + [self.max_replications]


@dataclass
class Verdict:
    """A trial's verdict over its replications. ``certain`` is None for one seed (no
    interval), else whether the interval decided it before the cap."""
    ok: bool
    certain: bool | None
    replications: int
    estimate: dict[str, float]
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    first: object = None            # what the first replication's sampler returned

    @property
    def label(self) -> str:
        if self.certain is None:
            return "met" if self.ok else "missed"
        return ("met" if self.ok else "missed") if self.certain else \
            ("met?" if self.ok else "missed?")


Sampler = Callable[[int], tuple[dict[str, float], object]]


def judge(sample: Sampler, slos: list[Slo], confidence: Confidence | None) -> Verdict:
    """The verdict on ``slos`` of the trial ``sample(i)`` runs with its i-th seed (it
    returns each SLO metric's figure and anything the caller keeps of replication 0)."""
    first_measured, first = sample(0)
    if confidence is None:
        return Verdict(met(first_measured, slos), None, 1, first_measured, first=first)
    runs = [first_measured]
    looks = confidence.looks()
    for look in looks:
        while len(runs) < look:
            runs.append(sample(len(runs))[0])
        decided = decide(runs, slos, confidence.level, len(looks))
        if decided.certain or look == looks[-1]:
            decided.first = first
            return decided
    raise AssertionError("unreachable: the last look decides")


def decide(runs: list[dict[str, float]], slos: list[Slo], level: float,
           num_looks: int) -> Verdict:
    """The verdict of one look at ``runs`` (one dict of metrics per replication)."""
    import scipy.stats         # about a second to import: paid only where one is judged
    r = len(runs)
    alpha = (1.0 - level) / num_looks
    t_met = float(scipy.stats.t.ppf(1.0 - alpha, r - 1))
    t_missed = float(scipy.stats.t.ppf(1.0 - alpha / len(slos), r - 1))
    estimate, low, high = {}, {}, {}
    all_met, any_missed = True, False
    for slo in slos:
        values = np.array([run[slo.metric] for run in runs], dtype=float)
        if not np.isfinite(values).all():
            estimate[slo.metric] = low[slo.metric] = high[slo.metric] = math.inf
            all_met = False
            any_missed |= bool(np.isinf(values).all())
            continue
        mean = float(values.mean())
        se = float(values.std(ddof=1)) / math.sqrt(r)
        estimate[slo.metric] = mean
        low[slo.metric], high[slo.metric] = mean - t_met * se, mean + t_met * se
        if slo.higher_is_better:
            all_met &= mean - t_met * se >= slo.target
            any_missed |= mean + t_missed * se < slo.target
        else:
            all_met &= mean + t_met * se <= slo.target
            any_missed |= mean - t_missed * se > slo.target
    if any_missed:
        return Verdict(False, True, r, estimate, low, high)
    if all_met:
        return Verdict(True, True, r, estimate, low, high)
    return Verdict(met(estimate, slos), False, r, estimate, low, high)
