"""report.html is self-contained and escapes everything from the scenario."""
from __future__ import annotations

from sim.config.scenario import Scenario
import sim
from sim.output.pages.report import build_report


def test_report_embeds_its_chart_data_and_escapes_scenario_strings():
    """Team and pool names with markup appear escaped, in the tables and in the charts'
    embedded data (where no name can close its script element); the charts' data, code
    and library are in the page."""
    import json
    import re

    evil = "<script>alert(1)</script>"
    scn = Scenario.model_validate({
        "name": "r&d <fleet>", "duration": 10, "description": evil,
        "workload": {"streams": {"s": {"team": evil, "model": "llama-3.1-8b",
                                       "arrival": {"type": "poisson", "rate": 2},
                                       "prompt_tokens": 100, "output_tokens": 20}}},
        "pools": {"p<b>": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
    })
    page = build_report(sim.run(scn))
    assert evil not in page and page.count("</script>") == 3     # the page's own three
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "p&lt;b&gt;" in page and "r&amp;d &lt;fleet&gt;" in page
    data = re.search(r'<script type="application/json" id="fleetsim-charts">(.*?)</script>',
                     page, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data
    charts = json.loads(data)["charts"]
    assert len(charts) == page.count('class="chart"') == 11
    assert charts[0]["title"] == "r&d <fleet>: time to first token, share of requests slower"
    assert "pool p<b>" in [s["label"] for s in charts[0]["panels"][0]["series"]]


def test_control_characters_reach_no_page_raw():
    """Names with control characters are refused when read; a description or a sweep
    table's values may still hold them (ESC, BEL): each page shows them as \\xNN, never
    raw (HTML cannot hold them)."""
    import pandas as pd
    import pydantic
    import pytest

    from sim.output.pages.sweep_report import build_sweep_report
    stream = {"team": "t", "model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": 2},
              "prompt_tokens": 100, "output_tokens": 20}
    pools = {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}}
    for bad in ({"name": "a\x1b[31m"}, {"pools": {"p\x07": pools["p"]}},
                {"workload": {"streams": {"s": {**stream, "team": "t\x1b"}}}},
                {"workload": {"streams": {"s\x1b": stream}}}):
        with pytest.raises(pydantic.ValidationError, match="printable"):
            Scenario.model_validate({"duration": 10, "workload": {"streams": {"s": stream}},
                                     "pools": pools, **bad})
    scn = Scenario.model_validate({"name": "n", "duration": 10, "pools": pools,
                                   "description": "bell\x07 esc\x1b[31m",
                                   "workload": {"streams": {"s": stream}}})
    table = pd.DataFrame({"pools.p.router": ["x\x1b[31m\x07", "y"], "arrived": [40, 40],
                          "output_tokens_per_s": [100.5, 200.0], "ttft_p99_s": [0.1, 0.2],
                          "tpot_p99_s": [0.01, 0.02]})
    report, sweep_page = build_report(sim.run(scn), table), build_sweep_report(table, "n")
    for page in (report, sweep_page):
        assert not any(ord(c) < 32 and c not in "\t\n\r" for c in page)
        assert "x\\x1b[31m\\x07" in page
    assert "bell\\x07 esc\\x1b[31m" in report


def _small_sweep():
    from sim.planning.sweep import sweep
    scn = Scenario.model_validate({
        "name": "sweep-me", "duration": 20,
        "workload": {"streams": {"s": {"team": "t", "model": "llama-3.1-8b",
                                       "arrival": {"type": "poisson", "rate": 5},
                                       "prompt_tokens": 200, "output_tokens": 50}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
    })
    return scn, sweep(scn, [("pools.p.replicas", [1, 2]),
                            ("workload.rate_scale", [1.0, 4.0])])


def test_report_shows_the_throughput_latency_curve_of_a_sweep():
    """With a sweep table the run's page gains the curve, the points' table and the
    Pareto views."""
    scn, table = _small_sweep()
    results = sim.run(scn)
    plain, with_sweep = build_report(results), build_report(results, table)
    assert "Sweep: latency against" not in plain and "Pareto views" not in plain
    assert "Sweep: latency against" in with_sweep and "Pareto views" in with_sweep
    assert with_sweep.count("data:image/png;base64,") == plain.count("data:image/png;base64,") + 2
    assert "pools.p.replicas" in with_sweep and "workload.rate_scale" in with_sweep


def test_sweep_curves_draw_one_line_per_value_of_the_first_varied_field():
    from sim.output.pages.sweep_report import sweep_figure, sweep_varied
    _, table = _small_sweep()
    assert sweep_varied(table) == ["pools.p.replicas", "workload.rate_scale"]
    fig = sweep_figure(table)
    ttft_ax = fig.axes[0]
    assert len(ttft_ax.lines) == 2
    xs = sorted(ttft_ax.lines[0].get_xdata())
    assert xs == sorted(table.loc[table["pools.p.replicas"] == 1, "output_tokens_per_s"])


def test_a_sweep_of_many_values_is_one_scatter_and_zero_latencies_warn_nothing():
    """Past MAX_SWEEP_LINES values of the first varied field, one scatter coloured by it
    (5,000 lines and a 5,000-entry legend took minutes); a column of zeros stays on a
    linear scale instead of warning that it cannot be log-scaled."""
    import warnings

    import pandas as pd

    from sim.output.pages.sweep_report import MAX_SWEEP_LINES, sweep_figure
    n = MAX_SWEEP_LINES + 1
    table = pd.DataFrame({"a": [i for i in range(n) for _ in (0, 1)],
                          "b": [0, 1] * n, "arrived": 10,
                          "output_tokens_per_s": [float(i) for i in range(2 * n)],
                          "ttft_p99_s": [0.5 + i for i in range(2 * n)], "tpot_p99_s": 0.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = sweep_figure(table)
    ttft_ax, tpot_ax = fig.axes[:2]
    assert len(ttft_ax.lines) == 0 and len(ttft_ax.collections) == 1
    assert len(ttft_ax.collections[0].get_offsets()) == 2 * n
    assert ttft_ax.get_yscale() == "log" and tpot_ax.get_yscale() == "linear"
    few = sweep_figure(table[table["a"] < 3])
    assert len(few.axes[0].lines) == 3 and few.axes[0].get_legend() is not None


def test_cli_run_with_a_sweep_table_and_sweep_report(tmp_path, capsys):
    from sim.cli import main
    scn_path = tmp_path / "s.yaml"
    scn, table = _small_sweep()
    import yaml
    scn_path.write_text(yaml.safe_dump(scn.model_dump(mode="json")), encoding="utf-8")
    csv_path = tmp_path / "sweep.csv"
    assert main(["sweep", str(scn_path), "--vary", "pools.p.replicas=1,2", "--out",
                 str(csv_path), "--report", str(tmp_path / "sweep.html"), "--quiet"]) == 0
    assert "Sweep: latency against" in (tmp_path / "sweep.html").read_text()
    assert main(["run", str(scn_path), "--out", str(tmp_path / "run"), "--quiet",
                 "--sweep", str(csv_path)]) == 0
    assert "Sweep: latency against" in (tmp_path / "run" / "report.html").read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    assert main(["run", str(scn_path), "--out", str(tmp_path / "run2"), "--quiet",
                 "--sweep", str(bad)]) == 2
    assert "not a `fleetsim sweep` table" in capsys.readouterr().err


def test_report_speaks_in_planner_units_and_shows_the_scenario_as_written(tmp_path):
    """Latencies in ms, shares in %, a glossary for busy/MFU/MBU/KV, the user's YAML with
    its comments (the expanded model only when overrides changed it), the version and
    where each pool's step times and price came from."""
    import html
    import re
    from pathlib import Path

    from sim.output.pages.report import build_report
    root = Path(__file__).resolve().parents[2]
    scenario = sim.load_scenario(root / "scenarios" / "quickstart.yaml")
    short = sim.with_overrides(scenario, duration_s=20)
    page = html.unescape(build_report(sim.run(short)))
    assert "latency (ms)" in page and "TTFT p99 (ms)" in page
    assert re.search(r"<td>\d+\.\d%</td>", page)                  # busy, MFU as percents
    assert "MFU: model FLOPs" in page and "MBU: bytes moved" in page
    assert f"fleetsim {sim.__version__}" in page and "on_demand price" in page
    assert "# Quick start" not in page and "duration: 20.0" in page   # changed: expanded
    text = (root / "scenarios" / "quickstart.yaml").read_text()
    unchanged = tmp_path / "q.yaml"
    unchanged.write_text(text.replace("duration: 5min", "duration: 20s"))
    page = html.unescape(build_report(sim.run(sim.load_scenario(unchanged))))
    assert "# Quick start" in page and "duration: 20s" in page
