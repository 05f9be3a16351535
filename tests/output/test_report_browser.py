"""report.html in a real browser (headless Chromium driven by Selenium): the page loads,
logs nothing to the console, draws every chart of its data (uPlot, inline) with tick
labels that are plain numbers (hh:mm past an hour), shows values on hover, and names from
the scenario are text, not markup; the sweep and size pages load and every image decodes.

Chromium and ChromeDriver come from Debian (``make test`` installs them when missing).
Run elsewhere without them, the test is skipped, unless ``FLEETSIM_BROWSER=required`` (as
``make test`` sets), where their absence fails it.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

import sim
from sim.config.scenario import Scenario
from sim.output.files.outputs import write_outputs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
REQUIRED = os.environ.get("FLEETSIM_BROWSER") == "required"
# as root on a closed network: no sandbox, and none of Chromium's own connections
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")
HOSTILE_TEAM = "<img src=x onerror=alert(1)>&team"
HOSTILE_DESCRIPTION = "</p><script>document.title='owned'</script>"


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        if REQUIRED:
            pytest.fail("FLEETSIM_BROWSER=required but chromium or chromedriver is not on PATH "
                        "(apt-get install chromium chromium-driver)")
        pytest.skip("no chromium/chromedriver on PATH")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _run_page(folder, name: str, duration_s: float, rate: float, slos=None):
    scn = Scenario.model_validate({
        "name": name, "description": HOSTILE_DESCRIPTION, "duration": duration_s,
        "sample_interval": 5,
        "workload": {"streams": {
            "s": {"team": HOSTILE_TEAM, "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": rate},
                  "prompt_tokens": 400, "output_tokens": 60},
            "t": {"team": "second", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": rate / 2},
                  "prompt_tokens": {"type": "lognormal", "mean": 600, "cv": 1.0},
                  "output_tokens": 30}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
        **({"slos": slos} if slos else {}),
    })
    write_outputs(sim.run(scn), folder)
    return folder / "report.html"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return _run_page(tmp_path_factory.mktemp("browser") / "run", "browser <check>", 20, 6,
                     {"ttft_p99": "500ms"})


@pytest.fixture(scope="module")
def long_page(tmp_path_factory):
    """Two simulated hours of light traffic: its time axes read hh:mm."""
    return _run_page(tmp_path_factory.mktemp("browser") / "long", "long <check>", 7200, 0.05)


# every chart's uPlot objects (one per panel) and the tick labels each of its axes drew
TICKS = """
const out = {};
for (const [name, plots] of Object.entries(window.fleetsimCharts)) {
  out[name] = plots.map(u => u.axes.map(a => a._values || []));
}
return out;"""


def _spec(browser) -> list[dict]:
    return browser.execute_script(
        "return JSON.parse(document.getElementById('fleetsim-charts').textContent).charts")


def test_report_draws_its_charts_cleanly_in_chromium(browser, page):
    browser.get(page.as_uri())
    assert browser.title == "fleetsim: browser <check>"
    assert browser.get_log("browser") == []         # no error, warning or message
    assert browser.execute_script("return document.images.length") == 0
    scripts = browser.execute_script(
        "return Array.from(document.scripts).map(s => [s.src, s.type])")
    assert scripts == [["", "application/json"], ["", ""], ["", ""]]     # all inline
    spec = _spec(browser)
    ticks = browser.execute_script(TICKS)
    assert sorted(ticks) == sorted(c["name"] for c in spec)     # every chart drawn
    for chart in spec:
        drawn = [p for p in chart["panels"] if p["series"]]
        assert len(ticks[chart["name"]]) == len(drawn) >= 1, chart["name"]
        titles = browser.execute_script(
            f"return window.fleetsimCharts[{chart['name']!r}][0].root"
            ".querySelector('.u-title').textContent")
        assert titles == chart["title"] and titles.startswith("browser <check>: ")
        for panel in ticks[chart["name"]]:
            x, y = panel[0], panel[1]
            assert x and y, chart["name"]
            for axis in panel[1:] + ([] if chart["x"]["format"] == "category" else [x]):
                for label in axis:
                    assert "$" not in label and not re.search(r"\de[+-]?\d", label)
                    assert re.fullmatch(r"-?\d{1,3}(,\d{3})*(\.\d+)?", label), \
                        (chart["name"], axis)
    categories = ticks["teams"][0][0]
    assert HOSTILE_TEAM in categories and "second" in categories
    assert all(re.fullmatch(r"\d+", t) for t in ticks["queue"][0][0])   # seconds


def test_hovering_a_chart_shows_its_values(browser, page):
    """uPlot's cursor: a point under the mouse puts each series' value in the legend."""
    browser.get(page.as_uri())
    values = browser.execute_script("""
        const u = window.fleetsimCharts.queue[0];
        u.setCursor({left: u.bbox.width / devicePixelRatio / 2, top: 10});
        return Array.from(u.root.querySelectorAll('.u-legend .u-value')).map(v => v.textContent);""")
    assert len(values) == 2 and all(re.fullmatch(r"[\d,.]+", v) for v in values), values


def test_time_axes_read_hh_mm_past_an_hour_in_chromium(browser, long_page):
    browser.get(long_page.as_uri())
    assert browser.get_log("browser") == []
    ticks = browser.execute_script(TICKS)
    for name in ("latency_over_time", "replicas", "throughput", "queue", "kv_util"):
        for panel in ticks[name]:
            assert panel[0] and all(re.fullmatch(r"\d\d:\d\d", t) for t in panel[0]), \
                (name, panel[0])
            assert "01:00" in panel[0], name
    labels = browser.execute_script(      # the x axis's label, under the bottom panel
        "return Object.values(window.fleetsimCharts).map(us => us[us.length - 1].axes[0].label)")
    assert "simulated time (hh:mm)" in labels and "arrival time (hh:mm)" in labels


def test_scenario_names_are_text_not_markup(browser, page):
    browser.get(page.as_uri())
    body = browser.execute_script("return document.body.innerText")
    assert HOSTILE_TEAM in body and HOSTILE_DESCRIPTION in body
    # the name was not parsed: no element made from it, no handler run
    assert browser.execute_script("return document.querySelectorAll('img[src=x]').length") == 0
    assert browser.title != "owned"


@pytest.fixture(scope="module")
def sweep_and_size_pages(tmp_path_factory):
    """The sweep's page (latency against replicas, with the SLO lines and the Pareto
    views) and a size page (its Pareto views, the options, the chosen fleet)."""
    import pandas as pd

    from sim.config.slos import parse_slo
    from sim.output.pages.sweep_report import build_sweep_report
    from sim.output.pages.size_report import build_size_report
    from sim.planning.sweep import sweep

    scn = Scenario.model_validate({
        "name": "sweep <check>", "duration": 10,
        "workload": {"streams": {"s": {"team": HOSTILE_TEAM, "model": "llama-3.1-8b",
                                       "arrival": {"type": "poisson", "rate": 6},
                                       "prompt_tokens": 400, "output_tokens": 60}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
        "slos": {"ttft_p99": "500ms", "tpot_p99": "50ms"},
    })
    folder = tmp_path_factory.mktemp("pages")
    sweep_page = folder / "sweep.html"
    sweep_page.write_text(build_sweep_report(sweep(scn, [("pools.p.replicas", [1, 2])]),
                                             scn.name, scn.slos), encoding="utf-8")
    options = pd.DataFrame({
        "pool": ["p", "p"], "hardware": ["H100-SXM", "A100-80GB"], "tp": [1, 1], "pp": [1, 1],
        "weight_dtype": ["bf16", "bf16"], "kv_dtype": [None, None], "replicas": [1, 2],
        "gpus": [1, 2], "feasible": [True, True], "cost_usd_per_h": [3.5, 4.2],
        "usd_per_million_output_tokens": [1.5, 2.1], "slo_margin_min": [0.2, 0.4],
        "output_tokens_per_s_per_gpu": [12_345.6, 4_000.0], "tokens_per_s_per_user": [60.0, 45.0],
        "cost_model": ["roofline", "roofline"], "note": ["", ""]})
    size_page = folder / "size.html"
    size_page.write_text(build_size_report(options, "size <check>",
                                           [parse_slo("ttft_p99=500ms")], None),
                         encoding="utf-8")
    return {"fleetsim sweep: sweep <check>": sweep_page,
            "fleetsim size: size <check>": size_page}


def test_sweep_and_size_pages_load_cleanly_in_chromium(browser, sweep_and_size_pages):
    for title, path in sweep_and_size_pages.items():
        browser.get(path.as_uri())
        assert browser.title == title
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        assert len(images) == 2 if "sweep" in title else len(images) == 1, images
        assert all(done and width > 0 and alt for done, width, alt in images), images
        assert browser.execute_script("return document.scripts.length") == 0
        assert browser.get_log("browser") == [], title
        body = browser.execute_script("return document.body.innerText")
        assert not re.search(r"\de[+-]\d", body), title    # no scientific notation
