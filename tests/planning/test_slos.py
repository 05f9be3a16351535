"""SLOs in the scenario: the verdict in summary.json, the terminal and the report; size
and check read the same block; check's baseline, JSON and JUnit output."""
from __future__ import annotations

import io
import json
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
import yaml
from rich.console import Console

import sim
from sim.cli import main
from sim.output.table import print_summary
from tests.simfactories import make_pool, make_scenario, poisson_stream


def _scenario(**top):
    return make_scenario(streams={"s": {**poisson_stream(rate=20.0), "team": "a"},
                                  "t": {**poisson_stream(rate=4.0), "team": "b"}},
                         pools={"main": make_pool(replicas=1)}, duration=30.0, warmup=5.0,
                         **top)


@pytest.fixture(scope="module")
def plain():
    return sim.run(_scenario())


def _s(seconds: float) -> str:
    """A latency target in seconds, as a scenario writes it (a bare number is refused)."""
    return f"{seconds!r}s"


def _measured(requests, team=None):
    r = requests[(requests["arrival_s"] >= 5.0) & (requests["status"] == "completed")]
    return r if team is None else r[r["team"] == team]


def test_slo_verdict_has_the_known_margins(plain):
    """Targets set from a run without SLOs (which the block does not change): TTFT p99 at
    twice its value is met by a margin of exactly 50%; TPOT p50 at half its value is
    missed by 100%; team b's E2E p95 at its value is met with margin 0."""
    done = _measured(plain.requests)
    ttft_p99 = float(np.percentile(done["ttft_s"], 99))
    tpot_p50 = float(np.percentile(done["tpot_s"].dropna(), 50))
    e2e_b = float(np.percentile(_measured(plain.requests, "b")["e2e_s"], 95))
    res = sim.run(_scenario(slos={"ttft_p99": _s(2 * ttft_p99), "tpot_p50": _s(tpot_p50 / 2),
                                  "teams": {"b": {"e2e_p95": _s(e2e_b)}}}))
    assert res.requests.equals(plain.requests)
    slo = res.summary["slo"]
    assert slo["met"] is False
    assert list(slo["fleet"]["objectives"]) == ["ttft_p99", "tpot_p50"]
    ttft, tpot = slo["fleet"]["objectives"].values()
    assert ttft["met"] and ttft["margin"] == pytest.approx(0.5)
    assert not tpot["met"]
    assert tpot["margin"] == pytest.approx(-1.0)
    team = slo["teams"]["b"]
    assert team["met"] and team["objectives"]["e2e_p95"]["margin"] == pytest.approx(0.0,
                                                                                  abs=1e-12)
    # goodput: requests after the warm-up completed within both bounds, per second measured
    within = ((done["ttft_s"] <= 2 * ttft_p99) & ~(done["tpot_s"] > tpot_p50 / 2)).sum()
    arrived = int((plain.requests["arrival_s"] >= 5.0).sum())
    assert slo["fleet"]["within_every_bound"] == within
    assert slo["fleet"]["attainment"] == pytest.approx(within / arrived)
    assert slo["fleet"]["goodput_requests_per_s"] == pytest.approx(
        within / (res.summary["end_s"] - 5.0))
    console = Console(file=io.StringIO(), width=200)
    print_summary(res.summary, console)
    text = console.file.getvalue()
    assert text.index("SLOs: MISSED") < text.index("arrived")
    assert "+50.0%" in text and "-100.0%" in text and "b: e2e_p95" in text


def test_a_streams_slos_and_the_longest_gap_between_tokens_have_their_known_margins(plain):
    """A stream's SLOs are judged over its requests only, and ``max_itl_p90`` is the 90th
    percentile of each request's longest gap between two output tokens (max_itl_s): set at
    its value for stream t it is met with margin 0, at half of stream s's it is missed."""
    done = _measured(plain.requests)
    gaps_t = done[done["stream"] == "t"]["max_itl_s"].dropna()
    gaps_s = done[done["stream"] == "s"]["max_itl_s"].dropna()
    p90_t, p90_s = float(np.percentile(gaps_t, 90)), float(np.percentile(gaps_s, 90))
    assert p90_t > 0 and p90_s > 0
    res = sim.run(_scenario(slos={"streams": {"t": {"max_itl_p90": _s(p90_t)},
                                              "s": {"max_itl_p90": _s(p90_s / 2)}}}))
    slo = res.summary["slo"]
    assert slo["met"] is False and "fleet" not in slo and "teams" not in slo
    t, s = slo["streams"]["t"], slo["streams"]["s"]
    assert t["met"] and t["objectives"]["max_itl_p90"]["margin"] == pytest.approx(0, abs=1e-12)
    assert t["requests"] == int((plain.requests["arrival_s"] >= 5.0)[
        plain.requests["stream"] == "t"].sum())
    assert not s["met"] and s["objectives"]["max_itl_p90"]["margin"] == pytest.approx(-1.0)
    console = Console(file=io.StringIO(), width=200)
    print_summary(res.summary, console)
    assert "stream s: max_itl_p90" in console.file.getvalue()


def test_a_stream_slo_for_a_stream_that_does_not_exist_is_located(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    data = _scenario().model_dump(mode="json", exclude_none=True)
    data["slos"] = {"streams": {"nope": {"ttft_p99": "2s"}}}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "slos.streams.nope" in err and "no stream 'nope'" in err and "streams: s, t" in err


def test_attainment_counts_every_arrival_after_the_warm_up(plain):
    done = _measured(plain.requests)
    bound = float(np.percentile(done["ttft_s"], 80))
    res = sim.run(_scenario(slos={"ttft_p90": "10s", "attainment": 0.5}))
    assert res.summary["slo"]["met"]
    res = sim.run(_scenario(slos={"ttft_p99": _s(bound), "attainment": 0.95}))
    fleet = res.summary["slo"]["fleet"]
    arrived = int((plain.requests["arrival_s"] >= 5.0).sum())
    share = int((done["ttft_s"] <= bound).sum()) / arrived
    attainment = fleet["objectives"]["attainment"]
    assert attainment["measured"] == pytest.approx(share) and share < 0.95
    assert not attainment["met"] and res.summary["slo"]["met"] is False


def test_report_opens_with_the_verdict(plain, tmp_path):
    from sim.output.pages.report import build_report
    res = sim.run(_scenario(slos={"ttft_p99": "100s"}))
    page = build_report(res)
    assert page.index("SLOs: all met") < page.index("<h2>Summary</h2>")
    assert "goodput (req/s)" in page


def _write(tmp_path: Path, name: str, **top) -> Path:
    path = tmp_path / name
    data = _scenario(**top).model_dump(mode="json", exclude_none=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_size_reads_the_scenarios_slos_and_a_flag_overrides_them(tmp_path, capsys):
    with_block = _write(tmp_path, "b.yaml", slos={"ttft_p99": "150ms"})
    without = _write(tmp_path, "n.yaml")
    assert main(["size", str(with_block)]) in (0, 1)
    from_block = capsys.readouterr().out
    assert main(["size", str(without), "--slo", "ttft_p99=150ms"]) in (0, 1)
    assert capsys.readouterr().out == from_block
    assert main(["size", str(with_block), "--slo", "ttft_p99=10s"]) == 0
    assert capsys.readouterr().out != from_block


def test_check_baseline_records_slos_and_normalised_paths(tmp_path, capsys, monkeypatch):
    scenario = _write(tmp_path, "s.yaml", slos={"ttft_p99": "2s"})
    baseline = tmp_path / "ci" / "baseline.json"
    baseline.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["check", "./s.yaml", "--baseline", str(baseline), "--update"]) == 0
    stored = json.loads(baseline.read_text())
    assert list(stored) == ["../s.yaml"] and stored["../s.yaml"]["slos"] == {"ttft_p99": 2.0}
    capsys.readouterr()
    # the same scenario typed otherwise, from elsewhere: found; its SLOs from the block
    monkeypatch.chdir(baseline.parent)
    junit = tmp_path / "ci" / "check.xml"
    assert main(["check", str(scenario), "--baseline", "baseline.json", "--junit",
                 str(junit), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    figures = out["scenarios"][0].pop("measured"), out["scenarios"][0].pop("baseline")
    assert out == {"ok": True, "baseline": "baseline.json",
                   "scenarios": [{"scenario": "../s.yaml", "ok": True, "problems": []}]}
    assert figures[1] == stored["../s.yaml"] and figures[0]["slos"] == {"ttft_p99": 2.0}
    root = ElementTree.parse(junit).getroot()
    assert root.get("tests") == "1" and root.get("failures") == "0"
    # other SLOs than the baseline's: not comparable, a failure with its reason
    assert main(["check", str(scenario), "--baseline", "baseline.json", "--slo",
                 "ttft_p99=1s", "--junit", str(junit)]) == 1
    assert "SLOs differ from the baseline's" in capsys.readouterr().out
    case = ElementTree.parse(junit).getroot().find("testsuite/testcase")
    assert case.get("name") == "../s.yaml"
    assert "SLOs differ" in case.find("failure").get("message")


def test_junit_never_replaces_a_file_check_did_not_write(tmp_path, capsys):
    scenario = _write(tmp_path, "s.yaml", slos={"ttft_p99": "2s"})
    baseline = tmp_path / "b.json"
    assert main(["check", str(scenario), "--baseline", str(baseline), "--update"]) == 0
    mine = tmp_path / "results.xml"
    mine.write_text("<?xml version='1.0'?><testsuites name='pytest'/>", encoding="utf-8")
    capsys.readouterr()
    assert main(["check", str(scenario), "--baseline", str(baseline),
                 "--junit", str(mine)]) == 2
    assert "not a JUnit report `fleetsim check` wrote" in capsys.readouterr().err
    assert mine.read_text().endswith("name='pytest'/>")


def test_junit_stays_well_formed_whatever_the_file_names(tmp_path):
    """A control character or a byte that is not UTF-8 in a scenario's file name made
    the report ill-formed or failed to write it after the whole check ran."""
    from sim.output.files.junit import junit_xml
    text = junit_xml([("ctl\x01x.yaml", ["drift\x02"]), ("bad\udcffname.yaml", [])],
                     "base\x03.json")
    root = ElementTree.fromstring(text.encode("utf-8"))
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ["ctl\\x01x.yaml", "bad\\xdcffname.yaml"]


def test_check_without_any_fleet_wide_slo_is_refused(tmp_path, capsys):
    """With no --slo and only a team's SLOs, check recorded 'slos: {}' and one replica per
    pool, then passed forever."""
    scenario = _write(tmp_path, "s.yaml", slos={"teams": {"a": {"ttft_p99": "1ms"}}})
    assert main(["check", str(scenario), "--baseline", str(tmp_path / "b.json"),
                 "--update"]) == 2
    assert "no SLO to size against" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


def test_compare_labels_never_collide(tmp_path, capsys, plain):
    """Two folders named x and a third named 'x (1)', or one named 'figure': each run keeps
    a column of its own."""
    from sim.output.files.outputs import write_outputs
    for name in ("A/x", "B/x", "C/x (1)", "figure"):
        write_outputs(plain, tmp_path / name)
    assert main(["compare", *(str(tmp_path / n) for n in ("A/x", "B/x", "C/x (1)", "figure")),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["runs"]) == ["1: x", "2: x", "3: x (1)", "4: figure"]
    assert data["figures"][0]["figure"] == "arrived"


def test_requests_never_served_count_against_a_latency_slo():
    """With no drain under overload, or with load shed, the requests that never finish are
    not 'faster' ones: they count as infinitely late, so that shedding cannot meet an SLO
    (it printed 'SLOs: all met' with 8,711 of 8,967 requests unfinished)."""
    flood = make_scenario(stream={**poisson_stream(rate=300.0), "team": "a"},
                          pool=make_pool(replicas=1), duration=20.0, drain=0.0,
                          slos={"ttft_p99": "10s", "ttft_p50": "10s"})
    res = sim.run(flood)
    fleet = res.summary["slo"]["fleet"]
    unfinished = int((res.requests["status"] == "unfinished").sum())
    assert fleet["unserved"] == unfinished > len(res.requests) / 2
    p99 = fleet["objectives"]["ttft_p99"]
    assert not p99["met"] and p99["measured"] is None and p99["margin"] is None
    assert not fleet["objectives"]["ttft_p50"]["met"]


def test_policy_refusals_do_not_count_against_a_latency_slo():
    """A request without a valid key says nothing about the fleet's latency."""
    from sim.output.slo import measure
    from sim.config.slos import parse_slo
    import pandas as pd
    req = pd.DataFrame({"status": ["completed"] * 3 + ["rejected", "rejected"],
                        "reject_reason": ["", "", "", "unauthorized", "queue_full"],
                        "ttft_s": [0.1, 0.2, 0.3, float("nan"), float("nan")]})
    got = measure(req, [parse_slo("ttft_p50=1s"), parse_slo("ttft_mean=1s")])
    assert got["ttft_p50"] == pytest.approx(0.25)     # of 0.1, 0.2, 0.3 and one infinite
    assert got["ttft_mean"] == float("inf")
    served = measure(req.iloc[:4], [parse_slo("ttft_mean=1s")])
    assert served["ttft_mean"] == pytest.approx(0.2)


def test_update_of_one_scenario_keeps_the_others_in_the_baseline(tmp_path, capsys):
    """A CI baseline serves a suite: recording one scenario anew keeps the others' entries
    (a later check of the whole suite still finds them)."""
    a = _write(tmp_path, "a.yaml", slos={"ttft_p99": "2s"})
    b = _write(tmp_path, "b.yaml", slos={"ttft_p99": "2s"})
    baseline = tmp_path / "base.json"
    assert main(["check", str(a), str(b), "--baseline", str(baseline), "--update"]) == 0
    first = json.loads(baseline.read_text())
    assert main(["check", str(b), "--baseline", str(baseline), "--update"]) == 0
    assert "1 scenarios recorded, 1 others kept" in capsys.readouterr().out
    assert json.loads(baseline.read_text()) == first
    assert main(["check", str(a), str(b), "--baseline", str(baseline)]) == 0


def test_a_scenario_written_back_keeps_its_targets_with_their_unit():
    """A latency target is dumped with its unit (seconds), so a scenario fleetsim writes
    back (results' scenario.yaml, a sweep's workers, an edited model_dump) reads back with
    the same targets, where a bare number would now be refused."""
    from sim.config.scenario import Scenario
    scenario = _scenario(slos={"ttft_p99": "250ms", "tpot_p50": _s(0.1 + 0.2),
                               "teams": {"b": {"e2e_p95": "2min"}}})
    for mode in ("python", "json"):
        data = scenario.model_dump(mode=mode)
        assert data["slos"]["ttft_p99"] == "0.25s"
        again = Scenario.model_validate(data)
        assert again.slos.ttft_p99 == 0.25 and again.slos.tpot_p50 == 0.1 + 0.2
        assert again.slos.teams["b"].e2e_p95 == 120.0
