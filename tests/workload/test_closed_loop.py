"""Closed-loop streams: a fixed number of clients, each sending when its last request ends."""
from __future__ import annotations

import numpy as np
import pytest

import sim
from tests.simfactories import make_pool, make_scenario, poisson_stream, uniform


def closed(concurrency: int, requests: int, **extra) -> dict:
    return {"arrival": {"type": "closed", "concurrency": concurrency, "requests": requests,
                        **extra},
            "prompt_tokens": uniform(200, 2000), "output_tokens": uniform(20, 200)}


def _in_flight_at(req, t):
    return int(((req.arrival_s <= t) & (req.finish_s > t)).sum())


def test_never_more_than_the_concurrency_in_flight_and_each_send_follows_an_end():
    res = sim.run(make_scenario(stream=closed(4, 60), duration=3600.0))
    req = res.requests.sort_values("arrival_s")
    assert len(req) == 60 and (req["status"].astype(str) == "completed").all()
    # the first wave at the stream's start, then one request per request ended
    assert (req["arrival_s"].iloc[:4] == 0.0).all()
    later = req["arrival_s"].iloc[4:].to_numpy()
    finishes = np.sort(req["finish_s"].to_numpy())
    assert np.allclose(later, finishes[:len(later)], rtol=0, atol=1e-12)
    for t in np.concatenate([req["arrival_s"].to_numpy(), finishes]):
        assert _in_flight_at(req, t) <= 4
    # and the clients are never idle while requests remain: 4 in flight at every send
    assert all(_in_flight_at(req, t) == 4 for t in later)


def test_think_time_delays_each_next_request():
    res = sim.run(make_scenario(stream=closed(2, 20, think_time=1.5), duration=3600.0))
    req = res.requests.sort_values("arrival_s")
    later = req["arrival_s"].iloc[2:].to_numpy()
    finishes = np.sort(req["finish_s"].to_numpy())[:len(later)]
    assert np.allclose(later, finishes + 1.5, rtol=0, atol=1e-9)


def test_the_window_end_stops_the_clients_and_what_was_sent_finishes():
    res = sim.run(make_scenario(stream=closed(2, 10_000), duration=5.0))
    req = res.requests
    assert 0 < len(req) < 10_000
    assert (req["arrival_s"] < 5.0).all()
    assert (req["status"].astype(str) == "completed").all()


def test_the_same_seed_gives_the_same_closed_loop_run():
    runs = [sim.run(make_scenario(stream=closed(3, 40), seed=7, duration=3600.0)).requests
            for _ in range(2)]
    cols = ["request_id", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
            "output_tokens"]
    assert runs[0][cols].equals(runs[1][cols])


def test_closed_and_open_streams_share_a_pool():
    res = sim.run(make_scenario(
        streams={"bench": closed(2, 30), "bg": poisson_stream(rate=1.0, prompt_tokens=100,
                                                              output_tokens=10)},
        duration=30.0))
    req = res.requests
    by = req.groupby(req["stream"].astype(str)).size()
    assert by["bench"] > 2 and by["bg"] > 5
    assert req["request_id"].is_unique
    assert (req["status"].astype(str) == "completed").all()


def test_a_closed_stream_with_a_gateway_and_a_front_end_still_ends_every_request():
    res = sim.run(make_scenario(stream={**closed(3, 25), "team": "a"},
                                pool=make_pool(front_end=0.05), duration=3600.0,
                                gateway={"teams": {"a": {"requests_per_min": 1000}}}))
    assert len(res.requests) == 25
    assert (res.requests["status"].astype(str) == "completed").all()


@pytest.mark.parametrize("arrival, field", [
    ({"type": "closed", "concurrency": 0, "requests": 5}, "concurrency"),
    ({"type": "closed", "concurrency": 2}, "requests"),
    ({"type": "closed", "concurrency": 2, "requests": 5, "think_time": -1}, "think_time"),
])
def test_bad_closed_loop_settings_are_refused_naming_the_field(tmp_path, arrival, field):
    from sim.cli import main
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "duration": 10, "workload": {"streams": {"s": {
            "model": "llama-3.1-8b", "arrival": arrival, "prompt_tokens": 10,
            "output_tokens": 10}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}}}))
    with pytest.raises(SystemExit) as exc:
        main(["check", str(path)])
    assert exc.value.code == 2


def test_a_refused_client_pauses_so_time_moves_and_the_window_still_ends():
    """Ten clients against a team allowed five at once: the five refused each pause a
    round trip before trying again, so the window closes with a bounded count."""
    from sim.core.simulation import REFUSED_PAUSE_S
    res = sim.run(make_scenario(stream={**closed(10, 1_000_000), "team": "a"}, duration=2.0,
                                gateway={"teams": {"a": {"max_concurrency": 5}}}))
    req = res.requests
    status = req["status"].astype(str)
    assert (status == "rejected").sum() > 0 and (status == "completed").sum() > 0
    assert len(req) < 10 * (2.0 / REFUSED_PAUSE_S + 10)
    assert req["arrival_s"].max() < 2.0
    refused = req[status == "rejected"].sort_values("arrival_s")
    assert refused["arrival_s"].iloc[-1] > 1.0          # time moved on between refusals


@pytest.mark.parametrize("think_s", [0.0, 2.0])
def test_throughput_follows_littles_law(think_s):
    """C clients, each waiting R for an answer then Z thinking, complete C / (R + Z)
    requests a second (Little's law over the cycle), within 2% on a long run."""
    users = 8
    res = sim.run(make_scenario(stream=closed(users, 2000, think_time=think_s),
                                duration=3600.0))
    req = res.requests
    assert (req["status"].astype(str) == "completed").all()
    # the steady part: after every client has finished its first request, up to the last
    # send (all clients are still busy then), counted from that send's own cycle
    start = np.sort(req["finish_s"].to_numpy())[users - 1]
    end = req["arrival_s"].max()
    inside = req[(req["arrival_s"] >= start) & (req["finish_s"] <= end)]
    cycle_s = inside["e2e_s"].mean() + think_s
    measured = len(req[(req["finish_s"] > start) & (req["finish_s"] <= end)]) / (end - start)
    assert measured == pytest.approx(users / cycle_s, rel=0.02)


def test_clients_without_a_request_count_send_until_the_window_ends():
    """40 users who each wait for the answer and think 2 s: no count, only the window."""
    stream = {"arrival": {"type": "closed", "concurrency": 40, "think_time": 2.0},
              "prompt_tokens": uniform(200, 2000), "output_tokens": uniform(20, 200)}
    res = sim.run(make_scenario(stream=stream, duration=120.0))
    req = res.requests.sort_values("arrival_s")
    assert len(req) > 40 * 3 and (req["status"].astype(str) == "completed").all()
    assert (req["arrival_s"] < 120.0).all() and req["request_id"].is_unique
    later = req["arrival_s"].iloc[40:].to_numpy()
    finishes = np.sort(req["finish_s"].to_numpy())[:len(later)]
    assert np.allclose(later, finishes + 2.0, rtol=0, atol=1e-9)
    for t in later:
        assert _in_flight_at(req, t) <= 40
    again = sim.run(make_scenario(stream=stream, duration=120.0))
    assert again.requests.equals(res.requests)


def test_clients_without_a_count_stop_at_max_requests_with_a_located_error(monkeypatch):
    """Where the estimate before the run does not see it coming (no pace known here), the
    run still stops at max_requests with a located error."""
    from sim.core import simulation
    monkeypatch.setattr(simulation, "closed_loop_paces", lambda *args: {})
    stream = {"arrival": {"type": "closed", "concurrency": 4},
              "prompt_tokens": 100, "output_tokens": 2}
    with pytest.raises(sim.ScenarioError, match="more than max_requests = 1,500") as err:
        sim.run(make_scenario(stream=stream, duration=3600.0, max_requests=1500))
    assert err.value.field == "workload.streams.s.arrival"


@pytest.mark.parametrize("concurrency, output_tokens, bound", [
    (4, 2, "per .* ms \\(think time \\+ the request alone on a replica\\)"),
    (100_000, 50, "replica\\(s\\) of pool 'p' finish at most .* requests/s"),
])
def test_a_closed_loop_past_max_requests_is_refused_before_the_run(concurrency,
                                                                    output_tokens, bound):
    """A served closed loop without a count is estimated before the run: each client at
    most one request per round trip, all together no more than the pool finishes. Past
    max_requests it is refused before its first event, with the estimate and what bounds
    it (it used to run until it got there, a minute and more for a large loop)."""
    from sim.config.resolve import resolve
    from sim.core.checks import RunRefused
    from sim.core.simulation import Simulation
    stream = {"arrival": {"type": "closed", "concurrency": concurrency},
              "prompt_tokens": 100, "output_tokens": output_tokens}
    scenario = make_scenario(stream=stream, duration=3600.0, max_requests=200_000)
    with pytest.raises(RunRefused, match=rf"about [0-9,]+ requests at most .*{bound}.*"
                                         r"past max_requests = 200,000: give the stream "
                                         r"arrival.requests") as err:
        Simulation(resolve(scenario)[0], ".")
    assert err.value.loc == ("workload", "streams", "s", "arrival")


@pytest.mark.parametrize("concurrency, think_s", [(3, 0.5), (2_000, 0.0)])
def test_a_closed_loop_sends_no_more_than_its_estimate(concurrency, think_s):
    """The estimate is a bound the run keeps: a few thinking clients (bound by their round
    trips) and many more clients than the replica holds (bound by the pool) send fewer
    requests than estimated, and at least a quarter as many (the estimate says
    something)."""
    from sim.config.resolve import resolve
    from sim.core.simulation import Simulation
    from sim.core.work import closed_loop_paces, estimate
    stream = {"arrival": {"type": "closed", "concurrency": concurrency,
                          "think_time": think_s},
              "prompt_tokens": uniform(100, 300), "output_tokens": uniform(20, 60)}
    scenario = make_scenario(stream=stream, duration=60.0, drain=0.0)
    simulation = Simulation(resolve(scenario)[0], ".")
    paces = closed_loop_paces(scenario, simulation.arrivals, simulation.pools,
                              simulation.resolved.stream_pool)
    [work] = estimate(scenario, {"s": concurrency}, paces)
    sent = len(sim.run(scenario).requests)
    assert work.requests / 4 <= sent <= work.requests


def _open_ended(concurrency: int, **extra) -> dict:
    stream = closed(concurrency, 1, **extra)
    stream["arrival"].pop("requests")
    return stream


@pytest.mark.parametrize("gateway, stream_extra, reason", [
    ({"keys": {"good": {"team": "a"}}}, {"api_key": "nope"}, "is not one of gateway.keys"),
    ({"keys": {"old": {"team": "a", "revoked_at": 0}}}, {"api_key": "old"}, "is revoked"),
    ({"models": {"llama-3.1-8b": {"pools": {"p": 1.0}, "teams": ["b"]}}},
     {"team": "a", "model": "llama-3.1-8b"}, "may not call model"),
])
def test_a_storm_of_refusals_is_refused_before_the_run_with_its_estimate(gateway, stream_extra,
                                                                         reason):
    """A closed loop the gateway refuses whatever happens (an unknown or revoked key, a
    model its team may not call) sends a request per client every 10 ms for its whole
    window: 40 clients for an hour are 14,400,000 requests, past max_requests, refused
    with the estimate before anything is drawn past the first wave (it ran for minutes)."""
    from sim.core.checks import RunRefused
    from sim.core.simulation import Simulation
    from sim.config.resolve import resolve
    scenario = make_scenario(stream={**_open_ended(40), **stream_extra}, duration=3600.0,
                             gateway=gateway, max_requests=10_000_000)
    resolved, _ = resolve(scenario)
    with pytest.raises(RunRefused, match=r"about 14,400,000 requests: every request is "
                                         rf"refused \(.*{reason}.*\).*past max_requests"):
        Simulation(resolved, ".")
    # the same clients with a key the gateway knows: allowed (their count is unknown)
    ok = make_scenario(stream=_open_ended(40), duration=3600.0, max_requests=10_000_000)
    assert Simulation(resolve(ok)[0], ".").work_notice is None


def test_a_long_run_says_its_estimate_before_it_starts(monkeypatch):
    """A run estimated past NOTICE_REQUESTS says how many requests and a rough time,
    before its first event (the largest closed loop on one small replica ran half a
    minute before anything was said)."""
    from sim.core import work
    monkeypatch.setattr(work, "NOTICE_REQUESTS", 500)
    told: list[str] = []
    seen_before_run: list[bool] = []

    def notice(text):
        told.append(text)

    def watch(simulation):
        seen_before_run.append(bool(told))
        return True                          # end the run at the first look
    sim.run(make_scenario(stream=_open_ended(600), duration=3600.0), notice=notice,
            watch=(1.0, watch))
    assert len(told) == 1 and seen_before_run == [True]
    assert "about " in told[0] and " requests to simulate" in told[0]
    assert "600 clients" in told[0] and " us a request" in told[0]
    told.clear()
    sim.run(make_scenario(stream=closed(4, 40), duration=3600.0), notice=notice)
    assert told == []                         # a short run says nothing
