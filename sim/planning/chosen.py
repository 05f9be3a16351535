"""The answer in a size table: each pool's cheapest feasible option, the fleet sized as
it says, and one line naming it."""
from __future__ import annotations

import pandas as pd

import sim
from sim.config.scenario import Scenario
from sim.planning.options import OPTION_FIELDS, option_values
from sim.config.overrides import with_values


def by_cost(table: pd.DataFrame, *first: str) -> pd.DataFrame:
    """``table`` cheapest first per hour (after ``first``: pool, feasible rows first), and
    at the same price the widest SLO margin first: of two fleets costing the same, the one
    with more headroom (an fp8 option's faster steps on the same GPUs) is the answer."""
    keys = [*first, "cost_usd_per_h"] + (["slo_margin_min"] if "slo_margin_min" in table
                                         else [])
    ascending = [k != "feasible" for k in first] + [True, False][:len(keys) - len(first)]
    return table.sort_values(keys, ascending=ascending, kind="stable", na_position="last")


def chosen_rows(table: pd.DataFrame) -> dict[str, pd.Series]:
    """Each pool's answer in a size table: the row of its cheapest feasible option (a
    pool with none is left out)."""
    chosen = {}
    for pool, rows in table.groupby("pool", sort=False):
        feasible = rows[rows["feasible"].astype(bool) & rows["replicas"].notna()]
        if len(feasible):
            chosen[str(pool)] = by_cost(feasible).iloc[0]
    return chosen


def chosen_options(table: pd.DataFrame) -> dict[str, dict]:
    """Each pool's answer in a size table: its cheapest feasible option and count (a pool
    with none is left out)."""
    return {pool: {"hardware": row["hardware"], "tp": int(row["tp"]),
                   "pp": int(row.get("pp", 1)), "weight_dtype": row["weight_dtype"],
                   "kv_dtype": row["kv_dtype"], "replicas": int(row["replicas"])}
            for pool, row in chosen_rows(table).items()}


def sized_fleet(scenario: Scenario, table: pd.DataFrame) -> Scenario | None:
    """The scenario with every pool sized as ``table`` answers, each set as its trials
    ran it (:func:`option_values`; idle pools at 0 replicas stay as configured); None
    when no pool has an answer."""
    chosen = {p: c for p, c in chosen_options(table).items() if c["replicas"] > 0}
    if not chosen:
        return None
    values = {}
    for pool, c in chosen.items():
        option = {k: c[k] for k in OPTION_FIELDS}
        values.update(option_values(scenario, pool, option, c["replicas"]))
    return with_values(scenario, values)


def chosen_fleet(scenario: Scenario, table: pd.DataFrame) -> tuple[Scenario, dict] | None:
    """:func:`sized_fleet` run once with its seed: (that scenario, its summary); None
    when no pool has an answer."""
    fleet = sized_fleet(scenario, table)
    return None if fleet is None else (fleet, sim.run(fleet).summary)


def chosen_line(pool: str, row) -> str:
    """One line naming a pool's answer: count, hardware, TP, PP, both precisions, engine
    and step-time source (the size table's row ``row``)."""
    return (f"pool {pool}: {int(row['replicas'])} x {row['hardware']} tp{int(row['tp'])} "
            f"pp{int(row.get('pp', 1))}, {row['weight_dtype']} weights, {row['kv_dtype']} "
            f"KV cache, engine {row.get('engine')}, step times from {row.get('cost_model')}")
