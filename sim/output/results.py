"""What a run returns: flat tables and the summary dictionary.

``requests`` has one row per request (the output contract's columns);
``timeseries`` one row per pool per sampling instant; ``steps`` one row per
engine step when ``record_steps`` is on; ``summary`` is what summary.json
holds. The tables are pandas DataFrames, made on first use from ``tables``
(numpy columns, :mod:`sim.output.columns`), from which the summary and the
data files are made without pandas.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from sim.config.scenario import Scenario
from sim.recording.accounts import RunAccount
from sim.output.columns import Coded, Table
from sim.recording.recorder import REQUEST_COLUMNS, REQUEST_ROW
from sim.output.summary import EarlierWork, summarise
from sim.output.timeseries import build_timeseries

REQUEST_TABLE_COLUMNS = [
    "request_id", "stream", "session", "turn", "team", "model", "pool", "replica",
    "priority", "arrival_s", "admitted_s", "first_token_s", "finish_s", "prompt_tokens", "cached_prompt_tokens",
    "output_tokens", "max_output_tokens", "status", "reject_reason", "ttft_s", "tpot_s",
    "e2e_s", "queue_s", "max_itl_s", "kv_transfer_s", "preemptions", "attempts",
    "api_key", "served_model", "cost_usd",
]


@dataclass(frozen=True)
class RunTables:
    """A run's tables as columns (``steps`` only with ``record_steps``)."""

    requests: Table
    timeseries: Table
    steps: Table | None = None


@dataclass
class Results:
    scenario: Scenario
    tables: RunTables
    summary: dict
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @cached_property
    def requests(self):
        """One row per request (a pandas DataFrame)."""
        return self.tables.requests.frame()

    @cached_property
    def timeseries(self):
        """One row per pool per sampling instant (a pandas DataFrame)."""
        return self.tables.timeseries.frame()

    @cached_property
    def steps(self):
        """One row per engine step (a pandas DataFrame), or None without
        ``record_steps``."""
        return self.tables.steps.frame() if self.tables.steps is not None else None

    def write(self, folder, *, force: bool = False, report: bool = True,
              requests: bool = True, csv: bool = False, png: bool = False) -> list:
        """Write the files ``fleetsim run --out folder`` writes (summary.json, the request
        table as Parquet, the time series, scenario.yaml, and unless ``report=False``
        report.html; ``requests=False``: no request table, ``csv=True``: the request table
        as CSV too, ``png=True``: the charts as PNG files under plots/, as
        ``--no-requests``, ``--csv`` and ``--png`` do) and return their paths. An existing non-empty ``folder`` is replaced only with ``force`` and only if
        fleetsim wrote it; otherwise ScenarioError."""
        from sim.output.files.outputs import write_results
        return write_results(self, folder, force=force, report=report, requests=requests,
                             csv=csv, png=png)


def latencies(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each request's ttft_s, tpot_s (NaN for one output token), e2e_s and queue_s from
    its recorded times and output length (recorder columns, any subset of rows)."""
    arrival, first, finish = raw["arrival_s"], raw["first_token_s"], raw["finish_s"]
    gaps = (raw["output_tokens"] - 1).astype(np.float64)
    return {"ttft_s": first - arrival,
            "tpot_s": np.divide(finish - first, gaps, out=np.full(len(gaps), np.nan),
                                where=gaps > 0),
            "e2e_s": finish - arrival,
            "queue_s": raw["admitted_s"] - arrival}


def _request_table(run: RunAccount) -> tuple[Table, EarlierWork]:
    """The recorded columns in request order, codes kept as codes, latencies derived:
    numpy all the way, one copy of each column (a long run has millions of rows); and,
    in the same order, each request's work on an earlier pool (not a table column)."""
    rec = run.recorder
    table = rec.requests
    order = np.argsort(table.column("request_id"), kind="stable")
    raw = {name: table.column(name)[order] for name in REQUEST_COLUMNS}
    out: dict[str, object] = dict(raw)
    out["stream"] = Coded(raw["stream"], run.stream_names)
    for column in REQUEST_ROW:
        if column.codes is not None:
            out[column.column] = Coded(raw[column.column], rec.code_table(column).names)
    out.update(latencies(raw))
    out["cost_usd"] = np.zeros(len(order))  # filled in by summarise (its pool's cost share)
    earlier = EarlierWork(pool=out["earlier_pool"],
                          tokens=raw["earlier_tokens"], carried=raw["carried_tokens"])
    return Table({name: out[name] for name in REQUEST_TABLE_COLUMNS}), earlier


def collect(run: RunAccount) -> Results:
    """The results of an ended run (``Simulation.account()``)."""
    rec = run.recorder
    requests, earlier = _request_table(run)
    pool_names = list(rec.pools.names)
    ts = build_timeseries(rec.samples.columns(), run.pools, run.scenario.sample_interval,
                          pool_names, run.end_s)
    steps = None
    if rec.steps is not None:
        steps = Table(rec.steps.columns())
        steps["pool"] = Coded(steps["pool"], rec.pools.names)
    summary = summarise(run, requests, ts, earlier)
    usage = [p.usage for p in run.pools.values()]
    extra = {"segments": sum(u.num_runs for u in usage),
             "steps": sum(u.num_steps for u in usage), "events": run.events_scheduled,
             "setup_s": run.setup_s}
    return Results(run.scenario, RunTables(requests, ts, steps), summary,
                   wall_s=run.wall_s, extra=extra)
