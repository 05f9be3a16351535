"""The measured step time at a published run's own operating point.

A Server run (Poisson arrivals at a fixed rate) that keeps up delivers the offered
output tokens, so by Little's law each replica runs, on average,
throughput / replicas x TPOT sequences, and each step carries the prompt tokens that
arrive in one TPOT. This sums the pool's cost model (its default: the measured kernels)
over such a step and sets it beside the published TPOT: what the kernels leave out of
the real engine's step (its host-side time) shows as the difference, apart from any
queueing the simulation adds. Nothing is fitted; a diagnostic of the GPU validation
table (``calibrate/validate/published.py``).

    python -m calibrate operating-point [--table scenarios/validate/gpu/published.yaml]
"""
from __future__ import annotations

from calibrate.validate.published import TableError, read_table
from sim.api import load_scenario
from sim.config.errors import ScenarioError
from sim.config.resolve import resolve
from sim.cost import build_cost_model


def _mean(dist) -> float:
    """A length distribution's mean as the scenario writes it (lognormal, constant...)."""
    for key in ("mean", "value"):
        value = getattr(dist, key, None)
        if value is not None:
            return float(value)
    raise ValueError(f"no mean for {type(dist).__name__}")


def operating_point(row) -> dict | None:
    """The step at ``row``'s published operating point, or None for a row that is not a
    Server run with a published throughput and TPOT p50."""
    pub = row.published
    if row.kind != "server" or "output_tokens_per_s" not in pub or "tpot_p50_ms" not in pub:
        return None
    scenario = load_scenario(row.scenario)
    resolved, _ = resolve(scenario)        # load_scenario checked it already
    (pool,) = resolved.pools.values()
    (stream,) = scenario.workload.streams.values()
    replicas = pool.cfg.replicas
    rate_per_s = float(stream.arrival.rate.value)          # a constant rate (Poisson rows)
    prompt, output = _mean(stream.prompt_tokens), _mean(stream.output_tokens)
    tpot_s = pub["tpot_p50_ms"] / 1e3
    running = pub["output_tokens_per_s"] / replicas * tpot_s
    prefill_tokens = rate_per_s / replicas * prompt * tpot_s
    cost = build_cost_model(pool, base_dir=row.scenario.parent)
    step_s = cost.step_scalar(running + prefill_tokens, running + prefill_tokens / prompt,
                              prefill_tokens * prompt / 2.0, running * (prompt + output / 2.0))[0]
    return {"name": row.name, "setting": row.setting, "running": running,
            "prefill_tokens": prefill_tokens, "step_ms": step_s * 1e3,
            "published_tpot_ms": pub["tpot_p50_ms"], "error": step_s / tpot_s - 1.0}


def command(args) -> int:
    """``python -m calibrate operating-point``: one markdown row per Server row."""
    try:
        rows = read_table(args.table)
    except TableError as exc:
        raise ScenarioError(str(exc)) from None
    print("| setting | sequences running per replica | prompt tokens per step "
          "| measured kernels' step ms | published TPOT p50 ms | difference |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        point = operating_point(row)
        if point is not None:
            print(f"| {point['setting']} | {point['running']:.0f} | {point['prefill_tokens']:.0f} "
                  f"| {point['step_ms']:.1f} | {point['published_tpot_ms']:.1f} "
                  f"| {point['error'] * 100:+.0f}% |")
    return 0

