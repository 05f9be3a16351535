"""The page `fleetsim size --report` writes: the options against each other (Pareto views
of cost per hour against the tightest SLO's margin, and output tokens per second per GPU
against tokens per second per user), the size table with the cost model each option's
step times came from, and the chosen fleet's cost per pool and per team, per hour and
per day."""
from __future__ import annotations

import pandas as pd

from sim.output.pages import pareto
from sim.output.pages.report import CSS, _e, _png, _table, per_hour_and_day
from sim.output.table import slo_value_text
SHOWN = ("pool", "hardware", "tp", "pp", "weight_dtype", "kv_dtype", "engine", "replicas",
         "gpus", "feasible", "cost_usd_per_h", "usd_per_million_output_tokens",
         "slo_margin_min", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user",
         "cost_model", "note")


def option_label(row) -> str:
    count = "" if pd.isna(row.get("replicas")) else f" x{int(row['replicas'])}"
    stages = row.get("pp", 1)
    pp = "" if pd.isna(stages) or stages == 1 else f" PP{int(stages)}"
    kv = row.get("kv_dtype")
    dtypes = row["weight_dtype"] if kv is None or pd.isna(kv) else \
        f"{row['weight_dtype']}/KV {kv}"
    return f"{row['pool']}: {row['hardware']} TP{row['tp']}{pp} {dtypes}{count}"


def _cell(value):
    if isinstance(value, float) and pd.isna(value):
        return None
    return value


def _fleet_section(fleet) -> list[str]:
    if fleet is None:
        return ["<h2>Chosen fleet</h2><p>No pool has an option meeting the SLOs.</p>"]
    scenario, summary = fleet
    pools = [[name, p["hardware"], p["tp"], p.get("pp", 1), p["replicas_mean"], p["cost_model"],
              *per_hour_and_day(p["cost_usd"], summary)]
             for name, p in summary["pools"].items()]
    teams = [[name, t["requests"], t["output_tokens"], *per_hour_and_day(t["cost_usd"], summary)]
             for name, t in summary["teams"].items()]
    idle = per_hour_and_day(summary["cost"].get("unattributed_usd", 0.0), summary)
    verdict = summary.get("slo") or {}
    met = ("" if not verdict else
           " Its SLOs were " + ("met" if verdict.get("met") else "MISSED")
           + f" in this run (seed {scenario.seed}).")
    return ["<h2>Chosen fleet</h2>",
            "<p>Each pool at its cheapest option that meets the SLOs, run once together."
            + _e(met) + "</p>",
            _table(["pool", "hardware", "TP", "PP", "replicas", "step times from", "USD per hour",
                    "USD per day"], pools),
            _table(["team", "requests", "output tokens", "USD per hour", "USD per day"],
                   teams + [["(idle capacity, no team's)", None, None, *idle]])]


def build_size_report(table: pd.DataFrame, title: str, slos, fleet) -> str:
    """The page: ``table`` (``fleetsim size``'s), the scenario's ``title``, the ``slos``
    sized for and ``fleet`` (``sim.planning.chosen.chosen_fleet``'s answer)."""
    shown = [c for c in SHOWN if c in table.columns]
    labels = [option_label(row) for _, row in table.iterrows()]
    feasible = table[table["feasible"].astype(bool)] if "feasible" in table else table
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<title>fleetsim size: {_e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}: sizing</h1>",
             "<p>Sized for " + _e(", ".join(f"{s.metric} {slo_value_text(s.metric, s.target)}"
                                           for s in slos))
             + ". Every option's fewest replicas meeting them; "
             "ranked by cost per hour within each pool.</p>"]
    if pareto.views(feasible):
        keep = [labels[i] for i in range(len(table)) if table.index[i] in feasible.index]
        parts += ["<h2>Options against each other</h2>",
                  "<p>The options no other beats on both figures, joined and named; the "
                  "dotted line is the SLOs' edge.</p>",
                  _png(pareto.pareto_figure(feasible.reset_index(drop=True), keep, title),
                       "Pareto fronts of the sizing options")]
    parts += ["<h2>Options</h2>",
              _table(shown, [[_cell(v) for v in row] for row in table[shown].values.tolist()]),
              *_fleet_section(fleet), "</body></html>"]
    return "\n".join(parts)
