"""Service-level objectives: in a scenario's ``slos:`` block, or on the command line as
``--slo ttft_p99=2s``, ``--slo tpot_p99=50ms``, ``--slo attainment=0.99``.

A latency SLO bounds a statistic (mean or a percentile) of TTFT, TPOT, end-to-end
latency, queueing delay or a request's longest gap between two output tokens
(``max_itl``: how smoothly it streamed) over the completed requests that arrived after
the warm-up; ``attainment`` is the least share of all those arrivals that must complete
within every percentile and mean bound given beside it. SLOs apply to every request, to
a team's (``teams:``) or to a stream's (``streams:``).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from pydantic import Field, create_model

from sim.config import units
from sim.config.common import LatencyTarget, Name, PositiveFraction, StrictModel
from sim.config.errors import ScenarioError

LATENCIES = ("ttft", "tpot", "e2e", "queue", "max_itl")
STATS = ("mean", "p50", "p90", "p95", "p99")
METRICS = [f"{m}_{s}" for m in LATENCIES for s in STATS] + ["attainment"]
WHAT = {"ttft": "time to first token", "tpot": "time per output token",
        "e2e": "end-to-end latency", "queue": "time queued before the first step",
        "max_itl": "a request's longest gap between two output tokens"}


@dataclass(frozen=True)
class Slo:
    metric: str
    target: float            # seconds, or a fraction for attainment

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "attainment"


def parse_slo(text: str) -> Slo:
    """``METRIC=VALUE`` from the command line."""
    if "=" not in text:
        raise ScenarioError(f"--slo {text!r}: write METRIC=VALUE, e.g. ttft_p99=2s",
                            field="--slo")
    metric, value = text.split("=", 1)
    if metric not in METRICS:
        close = difflib.get_close_matches(metric, METRICS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ScenarioError(f"--slo: unknown metric '{metric}'; valid: {', '.join(METRICS)}"
                            f"{hint}", field="--slo")
    try:
        target = float(value) if metric == "attainment" else units.seconds_with_unit(value)
    except ValueError as exc:
        raise ScenarioError(f"--slo {text!r}: {exc}", field="--slo") from None
    if metric == "attainment" and not 0 < target <= 1:
        raise ScenarioError(f"--slo {text!r}: attainment is a fraction in (0, 1]",
                            field="--slo")
    if metric != "attainment" and not 0 < target < math.inf:
        raise ScenarioError(f"--slo {text!r}: a latency target is a time greater than 0, "
                            "e.g. 2s or 50ms", field="--slo")
    if metric != "attainment" and not MIN_TARGET_S <= target <= MAX_TARGET_S:
        raise ScenarioError(f"--slo {text!r}: a latency target lies between 1 us and 30 "
                            "days", field="--slo")
    return Slo(metric, target)


# a latency target from a microsecond (no engine answers faster) to thirty days (a batch
# job's end-to-end bound); past them a target is a typo in units
MIN_TARGET_S, MAX_TARGET_S = 1e-6, 30 * 86400.0


def _target_fields() -> dict:
    fields = {f"{m}_{s}": (LatencyTarget | None, Field(
        None, ge=MIN_TARGET_S, le=MAX_TARGET_S,
        description=f"{s} of {WHAT[m]} at most this, with its unit: 2s or 50ms, never a "
                    "bare number (1 us to 30 days)"))
        for m in LATENCIES for s in STATS}
    fields["attainment"] = (PositiveFraction | None, Field(
        None, description="least share of requests (arrivals after the warm-up) completed "
                          "within every percentile and mean bound given beside it"))
    return fields


# Two models, each built once (26 fields apiece: building a model is most of what
# importing the configuration costs): a team's or a stream's SLOs, and the block.
ScopeSlos = create_model("ScopeSlos", __base__=StrictModel,
                         __doc__="One team's or one stream's SLOs (its requests only).",
                         **_target_fields())
SlosConfig = create_model(
    "SlosConfig", __base__=StrictModel,
    __doc__="SLOs over every request, a team's own over its requests, a stream's over its.",
    **_target_fields(),
    teams=(dict[Name, ScopeSlos], Field(
        default_factory=dict, description="Team -> SLOs over that team's requests")),
    streams=(dict[Name, ScopeSlos], Field(
        default_factory=dict, description="Stream -> SLOs over that stream's requests")))


ATTAINMENT_ALONE = ("attainment counts the requests within every latency bound given "
                    "beside it; with none it counts only completions (a fleet that "
                    "finishes everything in the drain attains 100%): add a latency bound, "
                    "e.g. ttft_p99")


def checked_slos(slos: list[Slo], field: str, label: str) -> list[Slo]:
    """``slos`` with each metric once and attainment beside a bound (ScenarioError at
    ``field`` otherwise; ``label`` names them in the message: "--slo " or "slos: ")."""
    metrics = [s.metric for s in slos]
    for metric in dict.fromkeys(m for m in metrics if metrics.count(m) > 1):
        raise ScenarioError(f"{label}{metric}: given twice; give each metric one target",
                            field=field)
    if metrics == ["attainment"]:
        raise ScenarioError(ATTAINMENT_ALONE, field=field)
    return slos


def targets(block) -> list[Slo]:
    """The SLOs a block (fleet or team) sets, in METRICS order."""
    return [Slo(m, float(getattr(block, m))) for m in METRICS
            if getattr(block, m, None) is not None]
