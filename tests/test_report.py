"""report.html is self-contained and escapes everything from the scenario."""
from __future__ import annotations

from sim.config.scenario import Scenario
import sim
from sim.report import build_report


def test_report_embeds_plots_and_escapes_scenario_strings():
    """Team and pool names with markup appear escaped; plots are inline PNG."""
    evil = "<script>alert(1)</script>"
    scn = Scenario.model_validate({
        "name": "r&d <fleet>", "duration": 10, "description": evil,
        "workload": {"streams": {"s": {"team": evil, "model": "llama-3.1-8b",
                                       "arrival": {"type": "poisson", "rate": 2},
                                       "prompt_tokens": 100, "output_tokens": 20}}},
        "pools": {"p<b>": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
    })
    page = build_report(sim.run(scn))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "p&lt;b&gt;" in page and "r&amp;d &lt;fleet&gt;" in page
    assert page.count("data:image/png;base64,") >= 6
    assert "http://" not in page and "https://" not in page       # nothing fetched
