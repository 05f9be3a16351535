"""Multi-turn sessions: each arrival starts a conversation whose turns follow its answers,
and whose later turns start from its earlier ones in the prefix cache."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

import sim
from sim.workload import generate_arrivals
from tests.simfactories import make_pool, make_scenario, uniform


def chat(turns=None, think_time="5s", **sessions) -> dict:
    return {"arrival": {"type": "poisson", "rate": 0.5},
            "prompt_tokens": uniform(50, 400), "output_tokens": uniform(20, 300),
            "prefix": {"tokens": 300},
            "sessions": {"turns": turns or uniform(1, 6), "think_time": think_time,
                         "think_time_distribution": "fixed", **sessions}}


def scenario(stream=None, caching=True, **top):
    return make_scenario(stream=stream or chat(), duration=400.0,
                         pool=make_pool(prefix_caching=caching), **top)


def turns_of(arr):
    """{(stream, conversation): [rows in turn order]} from the arrivals' links."""
    heads = [i for i in range(len(arr)) if np.isfinite(arr.arrival_s[i])]
    out = {}
    for i in heads:
        rows = [i]
        while arr.next_turn[rows[-1]] >= 0:
            rows.append(int(arr.next_turn[rows[-1]]))
        out[(int(arr.stream_index[i]), int(arr.session[i]))] = rows
    return out


def test_a_turns_prompt_is_the_conversation_so_far_plus_a_new_message():
    scn = scenario(stream=chat(max_context_tokens=3000))
    arr = generate_arrivals(scn.workload, scn.duration, np.random.SeedSequence(3), ".")
    convs = turns_of(arr)
    assert len(convs) > 100 and sum(map(len, convs.values())) == len(arr)
    assert max(map(len, convs.values())) > 1
    for rows in convs.values():
        assert len({int(arr.session[r]) for r in rows}) == 1
        assert 300 + 50 <= arr.prompt_tokens[rows[0]] <= 300 + 400
        for a, b in zip(rows, rows[1:]):
            message = arr.prompt_tokens[b] - arr.prompt_tokens[a] - arr.output_tokens[a]
            assert 50 <= message <= 400
            assert not np.isfinite(arr.arrival_s[b]) and arr.think_s[b] == 5.0
    assert (arr.prompt_tokens + arr.output_tokens <= 3000).all()


def test_each_turn_is_sent_its_think_time_after_the_last_answer_and_hits_the_cache():
    res = sim.run(scenario())
    req = res.requests.set_index("request_id")
    assert (req["status"].astype(str) == "completed").all()
    arr = generate_arrivals(scenario().workload, 400.0,
                            np.random.SeedSequence(0).spawn(3)[0], ".")
    pairs = [(a, b) for rows in turns_of(arr).values() for a, b in zip(rows, rows[1:])
             if b in req.index]
    assert len(pairs) > 50
    for a, b in pairs:
        assert req.loc[b, "arrival_s"] == pytest.approx(req.loc[a, "finish_s"] + 5.0,
                                                        abs=1e-9)
        # a later turn starts from its conversation's earlier prompt and answer
        said = req.loc[a, "prompt_tokens"] + req.loc[a, "output_tokens"]
        assert req.loc[b, "cached_prompt_tokens"] >= (said - 1) // 16 * 16 - 16
    # no turn is sent after the stream's window; a conversation cut there just ends
    assert (req["arrival_s"] < 400.0).all()
    assert len(req) < len(arr)
    hits = res.summary["pools"]["p"]["prefix_hit_rate"]
    assert hits > 0.6
    assert sim.run(scenario(caching=False)).summary["pools"]["p"]["prefix_hit_rate"] == 0


def test_the_request_table_names_each_requests_conversation_and_turn():
    """``session`` and ``turn`` link a conversation's rows in requests.parquet: turns 1..k of
    one (stream, session), each sent its think time after the previous one finished, its
    prompt the previous prompt and answer plus a message; other requests have -1."""
    two = {"chat": {**chat(), "team": "t"},
           "plain": {"arrival": {"type": "poisson", "rate": 0.5},
                     "prompt_tokens": 100, "output_tokens": 10, "team": "t"}}
    scn = make_scenario(streams=two, duration=400.0, pools={"p": make_pool(prefix_caching=True)})
    req = sim.run(scn).requests
    plain = req[req["stream"].astype(str) == "plain"]
    assert len(plain) > 50 and (plain["session"] == -1).all() and (plain["turn"] == -1).all()
    chats = req[req["stream"].astype(str) == "chat"].sort_values(["session", "turn"])
    assert (chats["session"] >= 0).all()
    longest = 0
    for _, conv in chats.groupby("session"):
        assert conv["turn"].tolist() == list(range(1, len(conv) + 1))
        longest = max(longest, len(conv))
        for (_, a), (_, b) in zip(conv.iloc[:-1].iterrows(), conv.iloc[1:].iterrows()):
            assert b["arrival_s"] == pytest.approx(a["finish_s"] + 5.0, abs=1e-9)
            message = b["prompt_tokens"] - a["prompt_tokens"] - a["output_tokens"]
            assert 50 <= message <= 400
    assert longest > 2


def test_sessions_are_deterministic_and_every_turn_ends_once():
    a, b = sim.run(scenario(seed=4)), sim.run(scenario(seed=4))
    assert a.requests.equals(b.requests)
    arrived = a.summary["requests"]["arrived"]
    assert arrived == len(a.requests) == a.requests["request_id"].nunique()


def test_a_refused_turn_ends_its_conversation():
    """A context window of 1,000 tokens on the pool: a turn past it is refused and its
    conversation sends nothing more."""
    res = sim.run(make_scenario(stream=chat(turns=8), duration=300.0,
                                pool=make_pool(prefix_caching=True, max_model_len=1000)))
    req = res.requests
    refused = req[req["status"].astype(str) == "rejected"]
    assert len(refused) > 0
    arr = generate_arrivals(make_scenario(stream=chat(turns=8)).workload, 300.0,
                            np.random.SeedSequence(0).spawn(3)[0], ".")
    sent = set(req["request_id"])
    for rows in turns_of(arr).values():
        got = [r for r in rows if r in sent]
        assert got == rows[:len(got)]             # turns in order, none skipped
        bad = [r for r in got if r in set(refused["request_id"])]
        assert not bad or bad[-1] == got[-1]      # nothing after a refusal


@pytest.mark.parametrize("bad,fragment", [
    ({"turns": {"type": "lognormal", "mean": 3, "cv": 1}}, "at most 1,000 turns"),
    ({"turns": 2000}, "at most 1,000 turns"),
])
def test_unbounded_turns_are_refused(bad, fragment):
    with pytest.raises(ValidationError, match=fragment):
        make_scenario(stream={**chat(), "sessions": bad})


def test_a_context_window_shorter_than_any_first_turn_is_refused():
    """Every conversation would end before its first turn: the stream would send nothing,
    so the scenario is refused at max_context_tokens (it ran and arrived 0)."""
    from sim.config.sanity import check
    stream = {**chat(max_context_tokens=200), "prompt_tokens": 100, "output_tokens": 20}
    problems = dict(check(scenario(stream=stream)))
    where = ("workload", "streams", "s", "sessions", "max_context_tokens")
    assert "every conversation would end before its first turn" in problems[where]
    assert "at least 420 tokens" in problems[where]          # prefix 300 + 100 + 20
    assert not any("first turn" in m for m in dict(check(scenario())).values())
