"""A catalogue of bad inputs: each must give ``error: file:line: field: message``
on stderr (valid choices or a did-you-mean where there are some), exit code 2,
no traceback, and no output folder.

Every case is a small edit of one good scenario (``BASE``), written to a
temporary folder and run through ``sim.cli.main``. Cases that show a bug in
the current behaviour are kept as strict xfails whose reason says what is
wrong.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sim
from sim.cli import main

# Line numbers are referred to by the cases below; keep them in step.
BASE = """\
name: robust
seed: 1
duration: 20s
sample_interval: 1s
workload:
  streams:
    chat:
      team: search
      model: llama-3.1-8b
      arrival: {type: poisson, rate: 2/s}
      prompt_tokens: {type: uniform, low: 100, high: 400}
      output_tokens: {type: fixed, value: 50}
gateway:
  teams:
    search:
      requests_per_min: 600
pools:
  main:
    model: llama-3.1-8b
    hardware: H100-SXM
    tp: 1
    replicas: 1
    scheduler:
      type: continuous
      max_num_batched_tokens: 8192
    router: {type: least_outstanding}
"""
#  1 name            10 arrival          19 model (pool)
#  2 seed            11 prompt_tokens    20 hardware
#  3 duration        12 output_tokens    21 tp
#  4 sample_interval 13 gateway          22 replicas
#  5 workload        14 teams            23 scheduler
#  6 streams         15 search           24 type
#  7 chat            16 requests_per_min 25 max_num_batched_tokens
#  8 team            17 pools            26 router
#  9 model (stream)  18 main

# The stream's arrival and lengths (lines 10-12), for trace cases.
POISSON_LINES = ("      arrival: {type: poisson, rate: 2/s}\n"
                 "      prompt_tokens: {type: uniform, low: 100, high: 400}\n"
                 "      output_tokens: {type: fixed, value: 50}\n")
TRACE_HEADER = "timestamp,prompt_tokens,output_tokens\n"

TINY_PROFILE = (Path(__file__).resolve().parent.parent / "profiles" / "calibrated" / "cpu"
                / "tiny-llama.yaml").read_text(encoding="utf-8")
KNOWN_HARDWARE = ["A100-80GB", "B200", "H100-SXM", "H200", "L40S", "MI300X"]
KNOWN_MODELS = ["llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "mixtral-8x7b",
                "qwen2.5-72b", "tiny-llama"]


def edit(*pairs: tuple[str, str], base: str = BASE) -> str:
    """``base`` with each ``old`` (which must occur exactly once) replaced by ``new``."""
    text = base
    for old, new in pairs:
        assert text.count(old) == 1, f"{old!r} must occur exactly once"
        text = text.replace(old, new)
    return text


def trace_stream(path: str = "t.csv") -> str:
    return edit((POISSON_LINES, f"      arrival: {{type: trace, path: {path}}}\n"))


def append_to_pool(block: str) -> str:
    """``block`` (lines indented for the pool ``main``) added at the end of the pool."""
    return BASE + block


@dataclass
class Case:
    id: str
    text: str | bytes
    line: int | None                 # expected line in ``where`` (None: no line given)
    field: str | None                # expected dotted field path (None: not named)
    fragments: list[str]             # must all appear in stderr
    where: str = "s.yaml"            # the file the error must name
    files: dict[str, str | bytes] = field(default_factory=dict)   # written beside s.yaml
    xfail: str | None = None         # reason, when the current behaviour is a bug
    absent: list[str] = field(default_factory=list)              # must not appear


CASES = [
    # -- YAML syntax ----------------------------------------------------------------------
    Case("yaml-bad-indentation", edit(("    tp: 1\n", "   tp: 1\n")), 21, None,
         ["invalid YAML", "expected <block end>", "started on line 18"]),
    Case("yaml-indented-too-deep", edit(("      arrival: {type: poisson",
                                         "        arrival: {type: poisson")), 10, None,
         ["invalid YAML", "mapping values are not allowed here"]),
    Case("yaml-unclosed-flow-mapping", edit(("rate: 2/s}", "rate: 2/s")), 11, None,
         ["invalid YAML", "expected ',' or '}'", "started on line 10"]),
    Case("yaml-unclosed-flow-sequence", edit(("hardware: H100-SXM", "hardware: [H100-SXM")),
         21, None, ["invalid YAML", "expected ',' or ']'", "started on line 20"]),
    Case("yaml-tab-indentation", edit(("    tp: 1\n", "\ttp: 1\n")), 21, None,
         ["invalid YAML", "found character '\\t' that cannot start any token"]),
    Case("yaml-unsafe-python-tag",
         edit(("name: robust", "name: !!python/object/apply:os.system ['echo hi']")), 1, None,
         ["invalid YAML", "could not determine a constructor", "only plain data"]),
    # -- duplicate keys ---------------------------------------------------------------------
    Case("duplicate-key-top-level", BASE + "seed: 2\n", 27, "seed",
         ["duplicate key 'seed'", "first on line 2, again on line 27"]),
    Case("duplicate-key-in-pool", edit(("    replicas: 1\n", "    replicas: 1\n    replicas: 2\n")),
         23, "pools.main.replicas",
         ["duplicate key 'replicas'", "first on line 22, again on line 23"]),
    # -- unknown keys, with the valid keys and a did-you-mean ------------------------------
    Case("unknown-key-top-level", edit(("seed: 1", "sede: 1")), 2, "sede",
         ["unknown key 'sede'", "valid keys: name, description, seed", "duration",
          "did you mean 'seed'?"]),
    Case("unknown-key-workload", edit(("  streams:", "  stream:")), 6, "workload.stream",
         ["unknown key 'stream'", "streams", "did you mean 'streams'?"]),
    Case("unknown-key-stream", edit(("      model: llama-3.1-8b\n", "      modle: llama-3.1-8b\n")),
         9, "workload.streams.chat.modle",
         ["unknown key 'modle'", "team, model, pool", "did you mean 'model'?"]),
    Case("unknown-key-arrival", edit(("{type: poisson, rate: 2/s}", "{type: poisson, rat: 2/s}")),
         10, "workload.streams.chat.arrival.rat",
         ["unknown key 'rat'", "valid keys: type, rate", "did you mean 'rate'?"]),
    Case("unknown-key-pool", edit(("    replicas: 1", "    replicsa: 1")), 22, "pools.main.replicsa",
         ["unknown key 'replicsa'", "model, hardware, tp, replicas", "scheduler",
          "did you mean 'replicas'?"]),
    Case("unknown-key-scheduler",
         edit(("      max_num_batched_tokens: 8192", "      max_num_batched_token: 8192")),
         25, "pools.main.scheduler.max_num_batched_token",
         ["unknown key 'max_num_batched_token'", "max_num_seqs, chunked_prefill",
          "did you mean 'max_num_batched_tokens'?"]),
    Case("unknown-key-router",
         edit(("{type: least_outstanding}", "{type: prefix_affinity, virtual_node: 8}")),
         26, "pools.main.router.virtual_node",
         ["unknown key 'virtual_node'", "load_factor", "did you mean 'virtual_nodes'?"]),
    Case("unknown-key-gateway-team",
         edit(("      requests_per_min: 600", "      requests_per_minute: 600")),
         16, "gateway.teams.search.requests_per_minute",
         ["unknown key 'requests_per_minute'", "tokens_per_min, max_concurrency",
          "did you mean 'requests_per_min'?"]),
    # -- wrong types ------------------------------------------------------------------------
    Case("string-for-int", edit(("replicas: 1", "replicas: two")), 22, "pools.main.replicas",
         ["valid integer", "'two'"]),
    Case("float-for-int", edit(("replicas: 1", "replicas: 1.5")), 22, "pools.main.replicas",
         ["valid integer", "fractional part", "1.5"]),
    Case("list-for-mapping", edit(("    scheduler:\n      type: continuous\n"
                                   "      max_num_batched_tokens: 8192\n",
                                   "    scheduler: [continuous]\n")),
         23, "pools.main.scheduler", ["valid dictionary", "['continuous']"]),
    Case("list-for-streams-mapping", edit(("    chat:\n      team: search\n",
                                           "    - chat:\n      team: search\n")),
         6, "workload.streams", ["valid dictionary"]),
    Case("mapping-for-string", edit(("    hardware: H100-SXM", "    hardware: {name: H100-SXM}")),
         20, "pools.main.hardware", ["valid string"]),
    Case("boolean-for-duration", edit(("duration: 20s", "duration: true")), 3, "duration",
         ["expected a number or a setting, got true"]),
    Case("boolean-for-int", edit(("replicas: 1", "replicas: true")), 22, "pools.main.replicas",
         ["got true: true and false are for yes/no fields only"]),
    Case("boolean-for-a-seed", edit(("seed: 1", "seed: true")), 2, "seed",
         ["expected a number or a setting, got true"]),
    # -- units ------------------------------------------------------------------------------
    Case("unit-parsecs", edit(("duration: 20s", "duration: 2 parsecs")), 3, "duration",
         ["cannot read '2 parsecs' as a duration", "'s'", "'ms'", "'min'", "'h'"]),
    Case("unit-word-fast", edit(("duration: 20s", "duration: fast")), 3, "duration",
         ["cannot read 'fast' as a duration", "'ms'"]),
    Case("unit-rate-per-fortnight", edit(("rate: 2/s", "rate: 2/fortnight")), 10,
         "workload.streams.chat.arrival.rate",
         ["cannot read '2/fortnight' as a rate", "'/s'", "'/min'", "'/h'"]),
    Case("unit-bytes-nonsense", append_to_pool("    kv_cache_bytes: 8 gigs\n"), 27,
         "pools.main.kv_cache_bytes", ["cannot read '8 gigs' as a size in bytes", "'GB'", "'GiB'"]),
    Case("unit-infinite-duration", edit(("duration: 20s", "duration: .inf")), 3, "duration",
         ["must be finite"]),
    # -- ranges -----------------------------------------------------------------------------
    Case("negative-rate", edit(("rate: 2/s", "rate: -2/s")), 10,
         "workload.streams.chat.arrival.rate", ["must be greater than 0", "'-2/s'"]),
    Case("zero-rate", edit(("rate: 2/s", "rate: 0/s")), 10,
         "workload.streams.chat.arrival.rate", ["must be greater than 0"]),
    Case("zero-duration", edit(("duration: 20s", "duration: 0s")), 3, "duration",
         ["must be greater than 0"]),
    Case("negative-seed", edit(("seed: 1", "seed: -1")), 2, "seed",
         ["greater than or equal to 0", "-1"]),
    Case("zero-output-tokens", edit(("{type: fixed, value: 50}", "{type: fixed, value: 0}")), 12,
         "workload.streams.chat.output_tokens.value", ["greater than or equal to 1"]),
    Case("uniform-high-below-low", edit(("low: 100, high: 400", "low: 400, high: 100")), 11,
         "workload.streams.chat.prompt_tokens", ["high (100) must be at least low (400)"]),
    Case("memory-utilization-above-one", append_to_pool("    gpu_memory_utilization: 1.5\n"), 27,
         "pools.main.gpu_memory_utilization", ["less than or equal to 1", "1.5"]),
    # -- workload shape ---------------------------------------------------------------------
    Case("empty-workload", edit((
        "  streams:\n    chat:\n      team: search\n      model: llama-3.1-8b\n" + POISSON_LINES,
        "  streams: {}\n")), 6, "workload.streams", ["workload has no streams"]),
    Case("stream-without-prompt-tokens",
         edit(("      prompt_tokens: {type: uniform, low: 100, high: 400}\n", "")), 7,
         "workload.streams.chat", ["prompt_tokens required for a poisson arrival"]),
    Case("trace-stream-with-lengths",
         edit(("{type: poisson, rate: 2/s}", "{type: trace, path: t.csv}")), 7,
         "workload.streams.chat", ["takes its lengths from the trace",
                                   "remove prompt_tokens and output_tokens"],
         files={"t.csv": TRACE_HEADER + "0,10,5\n"}),
    # -- trace files: the error names the CSV and its line ---------------------------------
    Case("trace-missing-column", trace_stream(), 1, None,
         ["missing column(s) 'output_tokens'", "it has 2 column(s)"],
         where="t.csv", files={"t.csv": "timestamp,prompt_tokens\n0,10\n1,20\n"}),
    Case("trace-unsorted-timestamps", trace_stream(), 4, None,
         ["timestamps must not decrease (less than on line 3)"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,5\n2,10,5\n1,10,5\n"}),
    Case("trace-non-numeric-value", trace_stream(), 3, None,
         ["column 'prompt_tokens'", "not a finite number"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,5\n1,abc,5\n"}),
    Case("trace-zero-output-tokens", trace_stream(), 2, None,
         ["column 'output_tokens'", "not a whole number >= 1"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,0\n"}),
    Case("trace-negative-timestamp", trace_stream(), 2, None,
         ["negative timestamp"], where="t.csv", files={"t.csv": TRACE_HEADER + "-1,10,5\n"}),
    Case("trace-header-only", trace_stream(), None, None, ["trace has no rows"], where="t.csv",
         files={"t.csv": TRACE_HEADER}),
    Case("trace-path-does-not-exist", trace_stream("no-such-trace.csv"), 10,
         "workload.streams.chat.arrival.path", ["no-such-trace.csv", "not found"]),
    Case("trace-row-with-extra-fields", trace_stream(), 2, None, ["t.csv"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,5,7,8\n"}),
    Case("empirical-csv-missing-column",
         edit(("{type: fixed, value: 50}", "{type: empirical, path: e.csv, column: out}")),
         1, None, ["missing column(s) 'out'", "it has 1 column(s)"], where="e.csv",
         files={"e.csv": "x\n1\n2\n"}),
    # -- profiles: models and GPUs ----------------------------------------------------------
    Case("model-does-not-fit", edit(("    model: llama-3.1-8b\n    hardware",
                                     "    model: llama-3.1-405b\n    hardware"),
                                    ("      model: llama-3.1-8b\n", "      model: llama-3.1-405b\n"),
                                    ("    tp: 1\n", "")),
         19, "pools.main.model", ["llama-3.1-405b", "leaves no room for a KV cache",
                                  "1 x H100-SXM", "no tp up to the 8 GPUs"]),
    Case("model-does-not-fit-at-given-tp",
         edit(("    model: llama-3.1-8b\n    hardware", "    model: llama-3.1-70b\n    hardware"),
              ("      model: llama-3.1-8b\n", "      model: llama-3.1-70b\n")),
         21, "pools.main.tp", ["llama-3.1-70b", "leaves no room for a KV cache", "it fits at tp=2"]),
    Case("tp-does-not-divide-heads", edit(("    tp: 1", "    tp: 3")), 21, "pools.main.tp",
         ["tp=3 does not divide", "32 attention heads / 8 KV heads", "valid: 1, 2, 4, 8"]),
    Case("tp-larger-than-node", edit(("    tp: 1", "    tp: 16")), 21, "pools.main.tp",
         ["tp=16 exceeds the 8 GPUs of one H100-SXM node"]),
    Case("unknown-hardware", edit(("hardware: H100-SXM", "hardware: H101")), 20,
         "pools.main.hardware", ["unknown hardware 'H101'", *KNOWN_HARDWARE]),
    Case("unknown-model", edit(("    model: llama-3.1-8b\n    hardware",
                                "    model: llama-9b\n    hardware")),
         19, "pools.main.model", ["unknown model 'llama-9b'", *KNOWN_MODELS]),
    Case("unknown-kv-dtype", append_to_pool("    kv_dtype: fp9\n"), 27, "pools.main.kv_dtype",
         ["'bf16'", "'fp8'", "'int4'", "did you mean 'fp8'?"]),
    # -- `type:` typos ----------------------------------------------------------------------
    Case("scheduler-type-typo", edit(("      type: continuous", "      type: continous")), 24,
         "pools.main.scheduler.type",
         ["Input tag 'continous'", "'single', 'static', 'continuous'", "did you mean 'continuous'?"]),
    Case("router-type-typo", edit(("{type: least_outstanding}", "{type: round_robbin}")), 26,
         "pools.main.router.type",
         ["Input tag 'round_robbin'", "'round_robin', 'least_outstanding', 'least_kv', "
          "'power_of_two', 'prefix_affinity'", "did you mean 'round_robin'?"]),
    Case("arrival-type-typo", edit(("type: poisson", "type: poison")), 10,
         "workload.streams.chat.arrival.type",
         ["Input tag 'poison'", "'poisson', 'gamma', 'trace'", "did you mean 'poisson'?"]),
    Case("length-type-typo", edit(("type: uniform", "type: uniformm")), 11,
         "workload.streams.chat.prompt_tokens.type",
         ["Input tag 'uniformm'", "'fixed', 'uniform', 'lognormal', 'exponential', 'empirical', "
          "'mixture'", "did you mean 'uniform'?"]),
    Case("rate-type-typo", edit(("rate: 2/s", "rate: {type: piecewize, points: [[0, 1]]}")), 10,
         "workload.streams.chat.arrival.rate.type",
         ["Input tag 'piecewize'", "'constant', 'piecewise', 'sinusoidal'",
          "did you mean 'piecewise'?"]),
    Case("autoscaler-type-typo", append_to_pool("    autoscaler: {type: targett, max_replicas: 3}\n"),
         27, "pools.main.autoscaler.type",
         ["Input tag 'targett'", "'fixed', 'target', 'scheduled'", "did you mean 'target'?"]),
    # -- autoscaler -------------------------------------------------------------------------
    Case("autoscaler-max-below-min", append_to_pool(
        "    autoscaler:\n      type: target\n      metric: queue_per_replica\n"
        "      target: 4\n      min_replicas: 3\n      max_replicas: 2\n"),
         27, "pools.main.autoscaler", ["max_replicas (2) must be at least min_replicas (3)"],
         absent=["pools.main.autoscaler.target"]),
    Case("autoscaler-metric-typo", append_to_pool(
        "    autoscaler:\n      type: target\n      metric: queue\n"
        "      target: 4\n      max_replicas: 2\n"),
         29, "pools.main.autoscaler.metric",
         ["'queue_per_replica', 'inflight_per_replica', 'ttft_p95' or 'kv_util'", "'queue'"]),
    Case("autoscaler-unknown-key", append_to_pool(
        "    autoscaler:\n      type: target\n      metric: queue_per_replica\n"
        "      target: 4\n      max_replica: 3\n"),
         31, "pools.main.autoscaler.max_replica",
         ["unknown key 'max_replica'", "did you mean 'max_replicas'?"],
         absent=["unknown key 'target'"]),
    # pydantic puts a discriminated union's tag in the loc; a tag that is also a key of the
    # input (`type: target` beside `target:`) must still be read as the tag, and the key
    # itself must still be named when the error is in it.
    Case("autoscaler-target-not-positive", append_to_pool(
        "    autoscaler:\n      type: target\n      metric: queue_per_replica\n"
        "      target: 0\n      max_replicas: 3\n"),
         30, "pools.main.autoscaler.target", ["greater than 0", "(got 0)"]),
    Case("autoscaler-ttft-target-bad-unit", append_to_pool(
        "    autoscaler:\n      type: target\n      metric: ttft_p95\n"
        "      target: soon\n      max_replicas: 3\n"),
         30, "pools.main.autoscaler.target", ["cannot read 'soon' as a duration"]),
    Case("scheduler-key-named-after-its-type", edit((
        "      max_num_batched_tokens: 8192\n",
        "      max_num_batched_tokens: 8192\n      continuous: 4\n      max_num_seqs: 0\n")),
         27, "pools.main.scheduler.max_num_seqs", ["greater than 0"],
         absent=["pools.main.scheduler.continuous: greater than"]),
    Case("rate-sinusoidal-amplitude-above-mean", edit((
        "rate: 2/s}", "rate: {type: sinusoidal, mean: 2/s, amplitude: 3/s, period: 1h}}")),
         10, "workload.streams.chat.arrival.rate", ["amplitude (3.0) must not exceed mean"]),
    Case("autoscaler-empty-schedule", append_to_pool(
        "    autoscaler:\n      type: scheduled\n      table: []\n"),
         29, "pools.main.autoscaler.table", ["at least 1 item"]),
    # -- gateway and routing ----------------------------------------------------------------
    Case("gateway-alias-to-nothing",
         edit(("gateway:\n", "gateway:\n  aliases:\n    chat: llama-big\n")),
         15, "gateway.aliases.chat",
         ["alias target 'llama-big' is not a served model", "served: none"]),
    Case("served-model-unknown-pool", edit((
        "gateway:\n", "gateway:\n  models:\n    llama-3.1-8b@1: {pools: {mian: 1.0}}\n")),
         15, "gateway.models.llama-3.1-8b@1", ["unknown pool 'mian'", "pools: main"]),
    Case("served-model-needs-other-weights", edit((
        "gateway:\n",
        "gateway:\n  models:\n    llama-3.1-8b@1: {pools: {main: 1.0}, weight_dtype: fp8}\n")),
         15, "gateway.models.llama-3.1-8b@1",
         ["is a fp8 variant but pool 'main' runs bf16 weights"]),
    Case("served-model-two-routes", edit((
        "gateway:\n",
        "gateway:\n  models:\n    m: {pools: {main: 1.0}, cascade: {first: main, then: big, "
        "escalation: 0.5}}\n")),
         15, "gateway.models.m", ["give exactly one of `pools`"]),
    Case("stream-model-not-served",
         edit(("      model: llama-3.1-8b\n", "      model: llama-3.1-70b\n")),
         9, "workload.streams.chat.model",
         ["no pool serves model 'llama-3.1-70b'", "pools' models: llama-3.1-8b"]),
    Case("stream-unknown-pool", edit(("      model: llama-3.1-8b\n", "      pool: mian\n")),
         9, "workload.streams.chat.pool", ["unknown pool 'mian'", "pools: main"]),
    Case("gateway-budget-two-limits", edit((
        "      requests_per_min: 600", "      budget: {tokens: 1000, usd: 5}")),
         16, "gateway.teams.search.budget", ["give exactly one of `tokens` and `usd`"]),
    Case("gateway-team-negative-limit", edit(("requests_per_min: 600", "requests_per_min: -5")),
         16, "gateway.teams.search.requests_per_min", ["greater than 0", "-5"]),
    Case("gateway-key-without-team", edit(("gateway:\n", "gateway:\n  keys:\n    k1: {}\n")),
         15, "gateway.keys.k1.team", ["missing required key 'team'"]),
    # -- the file itself --------------------------------------------------------------------
    Case("missing-required-key", edit(("duration: 20s\n", "")), 1, "duration",
         ["missing required key 'duration'"]),
    Case("not-utf8", BASE.replace("name: robust", "name: rob\xffst").encode("latin-1"), 1, None,
         ["file is not valid UTF-8 text"]),
    Case("not-utf8-later-line", BASE.replace("H100-SXM", "H100\xa0SXM").encode("latin-1"), 20, None,
         ["file is not valid UTF-8 text"]),
    Case("empty-file", "", 1, None, ["file is empty", "expected a mapping"]),
    Case("comments-only", "# nothing here\n# at all\n", 1, None, ["file is empty"]),
    Case("top-level-list", "- name: robust\n- seed: 1\n", 1, None,
         ["the top level must be a mapping", "got a list"]),
    Case("top-level-scalar", "just some words\n", 1, None,
         ["the top level must be a mapping", "got a str"]),
    Case("non-string-key", edit(("seed: 1", "~: 1")), 1, None, ["a key that reads as null"]),
    Case("number-key", edit(("seed: 1", "5: 1")), 2, None,
         ["the key 5 reads as a number, not a name: quote it (\"5\")"]),
    Case("boolean-key-of-a-pool", edit(("  main:\n", "  true:\n")), 18, "pools",
         ["the key True reads as true or false"]),
    # calibrated cost models: the profile exists and describes the pool (line 27)
    Case("calibrated-profile-missing",
         append_to_pool("    cost_model: {type: calibrated, profile: calibrated/cpu/nope.yaml}\n"),
         27, "pools.main.cost_model.profile", ["not found", "fleetsim calibrate"]),
    Case("calibrated-profile-of-another-model",
         append_to_pool("    weight_dtype: fp32\n"
                        "    cost_model: {type: calibrated, profile: "
                        "calibrated/cpu/tiny-llama.yaml}\n"),
         28, "pools.main.cost_model.profile", ["calibrated for model 'tiny-llama'",
                                                "llama-3.1-8b"]),
    Case("calibrated-profile-in-another-dtype",
         edit(("    model: llama-3.1-8b\n    hardware: H100-SXM", "    model: tiny-llama\n"
               "    hardware: H100-SXM"),
              ("      model: llama-3.1-8b", "      model: tiny-llama"))
         + "    cost_model: {type: calibrated, profile: calibrated/cpu/tiny-llama.yaml}\n",
         27, "pools.main.cost_model.profile", ["built for weight_dtype fp32",
                                                "weight_dtype is bf16", "--dtype bf16"]),
    *(Case(f"calibrated-profile-{name}",
           edit(("    model: llama-3.1-8b\n    hardware: H100-SXM", "    model: tiny-llama\n"
                 "    hardware: H100-SXM\n    weight_dtype: fp32"),
                ("      model: llama-3.1-8b", "      model: tiny-llama"))
           + "    cost_model: {type: calibrated, profile: p.yaml}\n",
           28, "pools.main.cost_model.profile", fragments,
           files={"p.yaml": TINY_PROFILE.replace(old, new, 1)})
      for name, old, new, fragments in (
          ("tp-infinite", "\ntp: 1\n", "\ntp: .inf\n", ["tp must be a whole number, got inf"]),
          ("layers-in-words", "  num_layers: 8\n", "  num_layers: eight\n",
           ["model.num_layers must be a whole number, got a str"]),
          ("layers-nan", "  num_layers: 8\n", "  num_layers: .nan\n",
           ["model.num_layers must be a whole number, got nan"]),
          ("dtype-a-list", "\ndtype: fp32\n", "\ndtype: [fp32]\n",
           ["p.yaml: dtype: Input should be 'fp32', 'bf16'", "got ['fp32']"]),
          ("with-a-misspelt-field", "\ntp: 1\n", "\ntp: 1\ntp_comm_measure: true\n",
           ["p.yaml: tp_comm_measure is not a field of a calibrated profile",
            "tp_comm_measured"]),
          ("table-not-increasing", "  - [2, ", "  - [1, ",
           ["p.yaml: tables.dense: x must be positive and strictly increasing"]),
          ("overhead-negative", "  constant_s: 0", "  constant_s: -0",
           ["p.yaml: overhead.constant_s must be a number >= 0, got -"]),
          ("engine-scale-zero", "\ntp: 1\n", "\ntp: 1\nengine: {model_scale: 0}\n",
           ["p.yaml: engine.model_scale must be a number > 0, got 0"]),
          ("of-a-later-version", "\nversion: 1\n", "\nversion: 2\n",
           ["version 2: this fleetsim reads calibrated profiles of version 1"]))),
    Case("calibrated-profile-not-a-profile",
         append_to_pool("    cost_model: {type: calibrated, profile: t.csv}\n"), 27,
         "pools.main.cost_model.profile", ["not a calibrated profile"],
         files={"t.csv": "a: 1\n"}),
]


def after_team(line: str) -> str:
    """BASE with ``line`` (a stream field, indented) right after the team: line 9."""
    return edit(("      team: search\n", f"      team: search\n      {line}\n"))


def after_duration(line: str) -> str:
    """BASE with a top-level ``line`` right after ``duration``: line 4."""
    return edit(("duration: 20s\n", f"duration: 20s\n{line}\n"))


def stream_field(key: str, value: str) -> str:
    """BASE with the stream's (line 10-12) ``key`` set to ``value``."""
    lines = {"arrival": "      arrival: {type: poisson, rate: 2/s}\n",
             "prompt_tokens": "      prompt_tokens: {type: uniform, low: 100, high: 400}\n",
             "output_tokens": "      output_tokens: {type: fixed, value: 50}\n"}
    return edit((lines[key], f"      {key}: {value}\n"))


STREAM = "workload.streams.chat"
# Part two: bounds on what drives work and memory, numbers that are not numbers, times
# against the run's length, routes that make no sense, YAML 1.1 surprises, and traces
# with absurd rows.
CASES += [
    # -- bounds: requests, samples, ticks, retries, priorities, times ----------------------
    Case("rate-a-billion-per-second", stream_field("arrival", "{type: poisson, rate: 1e9/s}"),
         5, "workload", ["2e+10 requests", "max_requests = 20,000,000"]),
    Case("requests-above-a-lowered-max", after_duration("max_requests: 10"), 6, "workload",
         ["up to 40 requests", "max_requests = 10"]),
    Case("max-requests-zero", after_duration("max_requests: 0"), 4, "max_requests",
         ["greater than 0"]),
    Case("gamma-rate-too-high", stream_field("arrival", "{type: gamma, rate: 5e7/s, cv: 2}"),
         5, "workload", ["requests", "max_requests"]),
    Case("sinusoidal-peak-counts", stream_field(
        "arrival", "{type: poisson, rate: {type: sinusoidal, mean: 1.2e6/s, amplitude: 1.2e6/s, "
                   "period: 10s}}"), 5, "workload", ["2.4e+07 requests"]),
    Case("piecewise-peak-counts", stream_field(
        "arrival", "{type: poisson, rate: {type: piecewise, points: [[0, 1/s], [10, 3e6/s]]}}"),
         5, "workload", ["3e+07 requests"]),
    Case("closed-too-many-requests",
         stream_field("arrival", "{type: closed, concurrency: 4, requests: 100000000}"),
         10, f"{STREAM}.arrival.requests", ["less than or equal to 10000000"]),
    Case("sample-interval-a-nanosecond", edit(("sample_interval: 1s", "sample_interval: 1ns")),
         4, "sample_interval", ["time-series samples", "the most is 2,000,000"]),
    Case("sample-interval-longer-than-run", edit(("sample_interval: 1s", "sample_interval: 1h")),
         4, "sample_interval", ["longer than the run's duration"]),
    Case("duration-1e308", edit(("duration: 20s", "duration: 1e308")), 3, "duration",
         ["less than or equal to 315360000"]),
    Case("duration-nan", edit(("duration: 20s", "duration: .nan")), 3, "duration", []),
    Case("drain-a-million-years", after_duration("drain: 3e13"), 4, "drain",
         ["less than or equal to 315360000"]),
    Case("warmup-longer-than-run", after_duration("warmup: 1h"), 4, "warmup",
         ["must end before the arrivals do"]),
    Case("warmup-equal-to-run", after_duration("warmup: 20s"), 4, "warmup",
         ["every request would be left out"]),
    Case("alias-of-an-alias", BASE.replace("pools:\n  main:", "  models:\n    llama:\n"
                                           "      pools: {main: 1}\n  aliases:\n"
                                           "    x: y\n    y: llama\npools:\n  main:"),
         21, "gateway.aliases.x", ["alias target 'y' is an alias itself (of 'llama')",
                                     "write x: llama"]),
    Case("slo-unknown-metric", BASE + "slos: {ttft_p999: 2s}\n", 27, "slos.ttft_p999",
         ["ttft_p99"]),
    Case("slo-negative-target", BASE + "slos: {ttft_p99: -2s}\n", 27, "slos.ttft_p99",
         ["greater than 0"]),
    Case("slo-attainment-above-one", BASE + "slos: {attainment: 1.5}\n", 27,
         "slos.attainment", ["less than or equal to 1"]),
    Case("slo-tpot-of-one-token-answers",
         edit(("      output_tokens: {type: fixed, value: 50}\n",
               "      output_tokens: {type: fixed, value: 1}\n")) + "slos: {tpot_p99: 50ms}\n",
         27, "slos.tpot_p99", ["no stream has an answer longer than one token"]),
    Case("slo-attainment-alone", BASE + "slos: {attainment: 0.9}\n", 27, "slos.attainment",
         ["attainment counts the requests within every latency bound"]),
    Case("slo-target-of-1e300-s", BASE + "slos: {ttft_p99: 1e300s}\n", 27, "slos.ttft_p99",
         ["less than or equal to 2592000"]),
    # a bare number is milliseconds to vLLM's --goodput and GuideLLM, seconds to the rest
    # of a scenario: a latency target must say which, and the error shows both readings
    Case("slo-target-without-a-unit", BASE + "slos: {tpot_p99: 50}\n", 27, "slos.tpot_p99",
         ["50 has no unit", "50ms (50 milliseconds", "50s (50 seconds)"]),
    Case("slo-target-a-string-without-a-unit", BASE + "slos: {ttft_p99: '2.5'}\n", 27,
         "slos.ttft_p99", ["2.5 has no unit", "2.5ms", "2.5s"]),
    Case("team-slo-target-without-a-unit",
         BASE + "slos:\n  teams:\n    search: {ttft_p99: 1}\n", 29,
         "slos.teams.search.ttft_p99", ["1 has no unit", "1ms", "1s"]),
    Case("slo-block-sets-nothing", BASE + "slos: {}\n", 27, "slos", ["sets no objective"]),
    Case("slo-team-that-sends-nothing", BASE + "slos:\n  teams:\n    serach: {ttft_p99: 1s}\n",
         29, "slos.teams.serach", ["no stream sends for team 'serach'", "teams: search"]),
    Case("boolean-for-a-priority", after_team("priority: true"), 9, f"{STREAM}.priority",
         ["got true"]),
    Case("boolean-for-memory-utilization", append_to_pool("    gpu_memory_utilization: true\n"),
         27, "pools.main.gpu_memory_utilization", ["got true"]),
    Case("boolean-in-a-sizing-list", append_to_pool("    sizing: {tp: [1, true]}\n"), 27,
         "pools.main.sizing.tp[1]", ["got true"]),
    Case("boolean-for-a-lognormal-cv", stream_field(
        "prompt_tokens", "{type: lognormal, mean: 100, cv: true}"), 11,
         f"{STREAM}.prompt_tokens.cv", ["got true"]),
    Case("sizing-lists-one-gpu-twice", append_to_pool(
        "    sizing: {hardware: [H100-SXM, h100-sxm]}\n"), 27, "pools.main.sizing.hardware",
         ["'H100-SXM' is listed twice"]),
    Case("sinusoid-of-a-nanosecond-period", stream_field(
        "arrival", "{type: poisson, rate: {type: sinusoidal, mean: 4/s, amplitude: 4/s, "
                   "period: 1e-9s}}"), 10, f"{STREAM}.arrival.rate.period",
         ["greater than or equal to 0.001"]),
    Case("sinusoid-phase-past-any-run", stream_field(
        "arrival", "{type: poisson, rate: {type: sinusoidal, mean: 4/s, amplitude: 4/s, "
                   "period: 10s, phase: 1e300s}}"), 10,
         f"{STREAM}.arrival.rate.phase", ["less than or equal to 315360000"]),
    Case("warmup-after-the-last-arrival",
         edit(("duration: 20s\n", "duration: 20s\nwarmup: 15s\n"),
              ("      team: search\n", "      team: search\n      end: 5s\n")), 4, "warmup",
         ["no request arrives after the warm-up (15 s", "shorten the warm-up"]),
    Case("stream-starts-after-run", after_team("start: 1h"), 9, f"{STREAM}.start",
         ["after the run's arrivals end", "send nothing"]),
    Case("stream-starts-at-run-end", after_team("start: 20s"), 9, f"{STREAM}.start",
         ["send nothing"]),
    Case("stream-ends-before-start", after_team("start: 10s\n      end: 5s"), 7, STREAM,
         ["must be after start"]),
    Case("priority-300-digits", after_team("priority: " + "9" * 300), 9, f"{STREAM}.priority",
         ["less than or equal to 1000000"]),
    Case("empirical-weights-overflow-their-sum",
         stream_field("prompt_tokens", "{type: empirical, values: [10, 20], "
                                       "weights: [1e308, 1e308]}"), 11,
         f"{STREAM}.prompt_tokens", ["'weights' sum to more than the largest number"]),
    Case("roofline-efficiency-zero", append_to_pool(
        "    cost_model: {type: roofline, flops_efficiency: 0}\n"), 27,
         "pools.main.cost_model.flops_efficiency", ["greater than 0"]),
    Case("fair-queue-weight-negative", append_to_pool(
        "    queue: {fair: true, weights: {search: -1}}\n"), 27,
         "pools.main.queue.weights.search", ["greater than 0"]),
    Case("looped-trace-of-a-nanosecond", edit(
        (POISSON_LINES, "      arrival: {type: trace, path: t.csv, loop: true}\n")), None,
         None, ["looping this trace", "more than 20,000,000"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,5\n0.000000001,10,5\n"}),
    Case("integer-of-5000-digits", after_team("priority: " + "9" * 5000), 9, None,
         ["invalid YAML", "an integer of 5,000 digits is too long (at most 4000)"]),
    Case("empty-stream-name", edit(("  streams:\n    chat:\n", "  streams:\n    \"\":\n")), 7,
         None, ["at least 1 character"]),
    Case("empty-team-name", edit(("team: search\n", 'team: ""\n')), 8, None,
         ["team", "at least 1 character"]),
    Case("priority-hugely-negative", after_team("priority: -" + "9" * 40), 9,
         f"{STREAM}.priority", ["greater than or equal to -1000000"]),
    Case("priority-fraction", after_team("priority: 1.5"), 9, f"{STREAM}.priority",
         ["integer"]),
    Case("retry-a-billion-attempts",
         after_team("retry: {max_attempts: 1000000000, base: 1s, max_delay: 2s}"), 9,
         f"{STREAM}.retry.max_attempts", ["less than or equal to 100"]),
    Case("retry-zero-delay", after_team("retry: {max_attempts: 3, base: 0s, max_delay: 0s}"),
         9, f"{STREAM}.retry.base", ["greater than 0"]),
    Case("retry-multiplier-inf", after_team("retry: {max_attempts: 3, multiplier: .inf}"), 9,
         f"{STREAM}.retry.multiplier", ["finite"]),
    Case("autoscaler-tick-a-nanosecond", append_to_pool(
        "    autoscaler: {type: target, metric: inflight_per_replica, target: 4, "
        "min_replicas: 1, max_replicas: 2, tick: 1ns}\n"), 27, "pools.main.autoscaler.tick",
         ["autoscaler decisions", "the most is 1,000,000"]),
    Case("replicas-1e29", edit(("    replicas: 1\n", "    replicas: 1e29\n")), 22,
         "pools.main.replicas", []),
    Case("team-name-too-long", edit(("team: search", "team: " + "t" * 200)), 8,
         f"{STREAM}.team", ["at most 128 characters"]),
    # -- numbers that are not numbers --------------------------------------------------------
    Case("lognormal-cv-inf", stream_field("prompt_tokens", "{type: lognormal, mean: 100, cv: .inf}"),
         11, f"{STREAM}.prompt_tokens.cv", ["finite number"]),
    Case("lognormal-cv-nan", stream_field("prompt_tokens", "{type: lognormal, mean: 100, cv: .nan}"),
         11, f"{STREAM}.prompt_tokens.cv", ["finite number"]),
    Case("lognormal-mean-inf", stream_field("output_tokens", "{type: lognormal, mean: .inf, cv: 1}"),
         12, f"{STREAM}.output_tokens.mean", ["finite number"]),
    Case("exponential-mean-inf",
         stream_field("output_tokens", "{type: exponential, mean: .inf}"),
         12, f"{STREAM}.output_tokens.mean", ["finite number"]),
    Case("gamma-cv-inf", stream_field("arrival", "{type: gamma, rate: 2/s, cv: .inf}"), 10,
         f"{STREAM}.arrival.cv", ["finite number"]),
    Case("rate-inf", stream_field("arrival", "{type: poisson, rate: .inf}"), 10,
         f"{STREAM}.arrival.rate", ["must be finite"]),
    Case("rate-scale-inf", edit(("  streams:\n", "  rate_scale: .inf\n  streams:\n")), 6,
         "workload.rate_scale", ["finite number"]),
    Case("requests-per-min-inf", edit(("requests_per_min: 600", "requests_per_min: .inf")), 16,
         "gateway.teams.search.requests_per_min", []),
    Case("memory-utilization-nan", append_to_pool("    gpu_memory_utilization: .nan\n"), 27,
         "pools.main.gpu_memory_utilization", []),
    Case("kv-cache-bytes-inf", append_to_pool("    kv_cache_bytes: .inf\n"), 27,
         "pools.main.kv_cache_bytes", []),
    Case("escalation-nan", edit(("gateway:\n", "gateway:\n  models:\n    m: {cascade: {first: "
                                 "main, then: big, escalation: .nan}}\n")), 15,
         "gateway.models.m.cascade.escalation", []),
    # -- routes that make no sense ---------------------------------------------------------
    Case("stream-pool-serves-another-model", edit(
        ("      team: search\n", "      team: search\n      pool: main\n"),
        ("      model: llama-3.1-8b\n      arrival", "      model: llama-3.1-70b\n      arrival")),
         9, f"{STREAM}.pool", ["serves 'llama-3.1-8b'", "not the stream's model 'llama-3.1-70b'"]),
    Case("cascade-escalates-to-itself", edit((
        "gateway:\n", "gateway:\n  models:\n    m: {cascade: {first: main, then: main, "
        "escalation: 0.5}}\n")), 15, "gateway.models.m.cascade",
         ["escalates to another pool", "both 'main'"]),
    Case("spot-pool-of-fixed-size", append_to_pool("    spot: {preemptions_per_hour: 3}\n"),
         27, "pools.main.spot", ["never gets back the replicas"]),
    Case("spot-pool-with-fixed-autoscaler", append_to_pool(
        "    spot: {preemptions_per_hour: 3}\n    autoscaler: {type: fixed}\n"), 27,
         "pools.main.spot", ["give it an autoscaler that replaces them"]),
    Case("spot-negative-preemptions", append_to_pool("    spot: {preemptions_per_hour: -1}\n"),
         27, "pools.main.spot.preemptions_per_hour", ["greater than or equal to 0"]),
    # -- YAML 1.1 surprises read as YAML 1.2 ------------------------------------------------
    Case("yaml11-sexagesimal-duration", edit(("duration: 20s", "duration: 1:30")), 3,
         "duration", ["cannot read '1:30' as a duration"]),
    Case("yaml11-sexagesimal-interval", edit(("sample_interval: 1s", "sample_interval: 0:30")),
         4, "sample_interval", ["cannot read '0:30'"]),
    Case("yaml11-on-key", after_duration("on: 3"), 4, "on", ["unknown key 'on'"]),
    Case("yaml11-yes-key-in-pool", append_to_pool("    yes: 1\n"), 27, "pools.main.yes",
         ["unknown key 'yes'"]),
    Case("yaml11-off-as-replicas", edit(("    replicas: 1\n", "    replicas: off\n")), 22,
         "pools.main.replicas", ["valid integer"]),
    Case("yaml11-octal-looking-tp", edit(("    tp: 1\n", "    tp: 03\n")), 21, "pools.main.tp",
         ["tp=3 does not divide"]),
    Case("yaml11-date-as-seed", edit(("seed: 1", "seed: 2024-01-01")), 2, "seed",
         ["valid integer"]),
    # -- traces with absurd rows -----------------------------------------------------------
    Case("trace-prompt-1e30-tokens", trace_stream(), 3, None,
         ["column 'prompt_tokens'", "more than 100,000,000 tokens"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,100,10\n1,1e30,10\n"}),
    Case("trace-output-1e30-tokens", trace_stream(), 2, None,
         ["column 'output_tokens'", "more than 100,000,000 tokens"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,100,1e30\n"}),
    Case("trace-infinite-timestamp", trace_stream(), 2, None, ["not a finite number"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "inf,100,10\n"}),
    Case("trace-nan-tokens", trace_stream(), 2, None, ["column 'prompt_tokens'"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "0,nan,10\n"}),
    Case("trace-fractional-tokens", trace_stream(), 2, None, ["not a whole number >= 1"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "0,10.5,10\n"}),
    Case("trace-time-scale-inf", edit((POISSON_LINES,
                                       "      arrival: {type: trace, path: t.csv, "
                                       "time_scale: .inf}\n")), 10,
         f"{STREAM}.arrival.time_scale", ["finite number"],
         files={"t.csv": TRACE_HEADER + "0,10,5\n"}),
    Case("trace-is-the-scenario-folder", trace_stream("."), 10, f"{STREAM}.arrival.path",
         ["folder"]),
]

# Part three: numbers past any sense, settings a policy would ignore, and routes or
# limits that could never do what they say.
GATEWAY_MODELS = ("gateway:\n  teams:\n    search:\n      requests_per_min: 600\n",
                  "gateway:\n  teams:\n    search:\n      requests_per_min: 600\n"
                  "  models:\n    llama-3.1-8b:\n      disaggregated: {prefill: main, "
                  "decode: %s}\n")
SECOND_POOL = ("  second:\n    model: %s\n    hardware: H100-SXM\n")
CASES += [
    Case("gamma-cv-a-million", stream_field("arrival", "{type: gamma, rate: 2/s, cv: 1e6}"),
         10, f"{STREAM}.arrival.cv", ["less than or equal to 100"]),
    Case("speculative-two-billion-drafts", append_to_pool(
        "    engine: vllm\n").replace(
        "      type: continuous\n      max_num_batched_tokens: 8192\n",
        "      type: speculative\n      proposer: ngram\n      acceptance_rate: 0.5\n"
        "      num_speculative_tokens: 2000000000\n"), 27,
         "pools.main.scheduler.num_speculative_tokens",
         ["less than or equal to 64"]),
    Case("price-of-1e300", append_to_pool("    price_per_gpu_hour: 1e300\n"), 27,
         "pools.main.price_per_gpu_hour", ["less than or equal to 10000"]),
    Case("spot-a-billion-preemptions", append_to_pool(
        "    spot: {preemptions_per_hour: 1e9}\n"), 27,
         "pools.main.spot.preemptions_per_hour", ["less than or equal to 3600"]),
    Case("retry-max-delay-below-base", after_team(
        "retry: {max_attempts: 3, base: 10s, max_delay: 1s}"), 9, f"{STREAM}.retry",
         ["max_delay (1 s) is below base (10 s)"]),
    Case("priority-aging-with-fcfs", edit((
        "      max_num_batched_tokens: 8192\n",
        "      max_num_batched_tokens: 8192\n      priority_aging: 10s\n")), 23,
         "pools.main.scheduler", ["policy 'fcfs' ignores"]),
    Case("queue-weights-without-fair", append_to_pool(
        "    queue: {weights: {search: 2}}\n"), 27, "pools.main.queue.weights",
         ["only with fair: true"]),
    Case("queue-weights-of-an-unknown-team", append_to_pool(
        "    queue: {fair: true, weights: {serach: 2}}\n"), 27,
         "pools.main.queue.weights.serach", ["unknown team 'serach'", "search"]),
    Case("scheduled-autoscaler-all-zero", append_to_pool(
        "    autoscaler: {type: scheduled, table: [[0, 0], [3600, 0]]}\n"), 27,
         "pools.main.autoscaler.table", ["never serve a request"]),
    Case("scheduled-autoscaler-zero-while-the-run-lasts", append_to_pool(
        "    autoscaler: {type: scheduled, table: [[0, 0], [7200, 2]]}\n"), 27,
         "pools.main.autoscaler.table", ["rows in force during the run (3620 s with its "
                                         "drain) all ask for 0 replicas"]),
    Case("scheduled-row-shorter-than-a-decision", append_to_pool(
        "    autoscaler: {type: scheduled, table: [[0, 1], [1, 3], [100, 1]]}\n"), 27,
         "pools.main.autoscaler.table[0]", ["row 0 holds for 1 s, less than the 2 s"]),
    Case("api-key-of-another-team", edit(
        ("      team: search\n", "      team: search\n      api_key: k\n"),
        ("gateway:\n", "gateway:\n  keys:\n    k: {team: ads}\n")), 8,
         f"{STREAM}.team", ["its API key 'k' belongs to 'ads'"]),
    Case("usd-budget-without-prices", edit((
        "      requests_per_min: 600", "      budget: {usd: 5}")), 16,
         "gateway.teams.search.budget.usd", ["no served model has a price"]),
    Case("max-model-len-above-the-model", append_to_pool("    max_model_len: 200000\n"), 27,
         "pools.main.max_model_len", ["longer than llama-3.1-8b's context of 131072"]),
    Case("draft-model-bigger-than-target", edit((
        "      type: continuous\n      max_num_batched_tokens: 8192\n",
        "      type: speculative\n      draft_model: llama-3.1-70b\n"
        "      acceptance_rate: 0.5\n")), 25, "pools.main.scheduler.draft_model",
         ["is not smaller than the model it drafts for"]),
    Case("prefix-longer-than-the-context", after_team("prefix: {tokens: 131071}"), 9,
         f"{STREAM}.prefix.tokens", ["leaves no room", "every request would be refused"]),
    Case("inline-model-named-otherwise", after_duration(
        "models:\n  mine:\n    name: other\n    num_layers: 2\n    hidden_size: 64\n"
        "    num_heads: 4\n    num_kv_heads: 4\n    head_dim: 16\n    ffn_size: 128\n"
        "    vocab_size: 1000"), 6, "models.mine.name", ["listed as 'mine' but named 'other'"]),
    Case("trace-column-named-twice", trace_stream(), 1, None, ["'prompt_tokens' more than once"],
         where="t.csv",
         files={"t.csv": "timestamp,prompt_tokens,output_tokens,prompt_tokens\n0,10,5,20\n"}),
    Case("trace-all-after-the-run", trace_stream(), None, None,
         ["every request of the trace arrives at or after 20 s", "send nothing"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "100,10,5\n200,10,5\n"}),
    Case("poisson-rate-of-1e-300", stream_field("arrival", "{type: poisson, rate: 1e-300}"),
         7, f"{STREAM}", ["would most likely send nothing"]),
    Case("mixture-nested-40-deep", stream_field(
        "output_tokens", "{type: mixture, components: [" * 0 + "{type: fixed, value: 5}".join(
            ["{type: mixture, components: [{weight: 1, dist: " * 40, "}]}" * 40])), None,
         None, ["nested more than 32 levels deep"]),
    Case("gamma-cv-1e-200", stream_field("arrival", "{type: gamma, rate: 2/s, cv: 1e-200}"),
         10, f"{STREAM}.arrival.cv", ["greater than or equal to 0.001"]),
    Case("mixture-weights-overflow-their-sum", stream_field(
        "output_tokens", "{type: mixture, components: [{weight: 1e308, dist: 5}, "
                         "{weight: 1e308, dist: 6}]}"), 12, f"{STREAM}.output_tokens",
         ["add up to a finite number"]),
    Case("trace-path-with-nul", trace_stream('"t\\0.csv"'), 10, f"{STREAM}.arrival.path",
         ["cannot hold a NUL character"]),
    Case("prefix-of-1e30-groups", after_team("prefix: {tokens: 10, groups: " + "1" + "0" * 30
                                             + "}"), 9, f"{STREAM}.prefix.groups",
         ["less than or equal to 100000000"]),
    Case("trace-time-scale-denormal", edit((POISSON_LINES, "      arrival: {type: trace, path: "
                                            "t.csv, loop: true, time_scale: 5e-324}\n")), 10,
         f"{STREAM}.arrival.time_scale", ["greater than or equal to 0.000001"],
         files={"t.csv": TRACE_HEADER + "0,10,5\n1,10,5\n"}),
    Case("trace-timestamp-1e308", trace_stream(), 3, None, ["1e+308 s is past any run"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "0,10,5\n1e308,10,5\n"}),
    Case("team-max-priority-1e30", edit(("      requests_per_min: 600",
                                         "      max_priority: 1" + "0" * 30)), 16,
         "gateway.teams.search.max_priority", ["less than or equal to 1000000"]),
    Case("block-of-two-billion-tokens", edit(("    tp: 1\n", "    tp: 1\n    block_size: "
                                              "2147483647\n")), 22, "pools.main.block_size",
         ["less than or equal to 4096"]),
    Case("affinity-ring-of-a-billion-points", edit((
        "    router: {type: least_outstanding}", "    router: {type: prefix_affinity, "
        "virtual_nodes: 1000000000}")), 26, "pools.main.router.virtual_nodes",
         ["less than or equal to 4096"]),
    Case("affinity-load-factor-1e308", edit((
        "    router: {type: least_outstanding}", "    router: {type: prefix_affinity, "
        "load_factor: 1e308}")), 26, "pools.main.router.load_factor",
         ["less than or equal to 1000"]),
    Case("autoscaler-tick-after-the-run", append_to_pool(
        "    autoscaler: {type: target, metric: queue_per_replica, target: 4, "
        "max_replicas: 4, tick: 2h}\n"), 27, "pools.main.autoscaler.tick",
         ["would never act"]),
    Case("api-key-with-no-keys-checked", after_team("api_key: k1"), 9, f"{STREAM}.api_key",
         ["gateway checks none"]),
    Case("route-by-length-to-one-pool", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        "  models:\n    llama-3.1-8b:\n      by_prompt_length: {threshold_tokens: 200, "
        "short: main, long: main}\n")), 19, "gateway.models.llama-3.1-8b.by_prompt_length.long",
         ["both pool 'main'"]),
    Case("every-request-longer-than-the-pool-takes", append_to_pool(
        "    max_model_len: 120\n"), 7, STREAM, ["shortest request (150 tokens",
                                                 "every request would be refused"]),
    Case("disaggregated-on-one-pool", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[1] % "main")),
         19, "gateway.models.llama-3.1-8b.disaggregated.decode", ["both pool 'main'"]),
    Case("disaggregated-across-two-models", edit(
        (GATEWAY_MODELS[0], GATEWAY_MODELS[1] % "second")) + SECOND_POOL % "tiny-llama", 19,
         "gateway.models.llama-3.1-8b.disaggregated.decode",
         ["cannot be decoded by another"]),
]

# Part four: settings that pass every field's own check yet leave a stream, a route or a
# pool with nothing to do.
SPLIT = ("  models:\n    llama-3.1-8b:\n      by_prompt_length: {threshold_tokens: %d, "
         "short: main, long: second}\n")
CASES += [
    Case("piecewise-rate-zero-over-the-run", stream_field(
        "arrival", "{type: poisson, rate: {type: piecewise, points: [[0, 0], [100, 5]]}}"),
         7, STREAM, ["adds up to 0 requests", "send nothing"]),
    Case("alias-shadows-a-served-model", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        "  models:\n    llama-3.1-8b: {pools: {main: 1}}\n    fast: {pools: {main: 1}}\n"
        "  aliases:\n    llama-3.1-8b: fast\n")), 21, "gateway.aliases.llama-3.1-8b",
         ["both an alias (of 'fast') and a served model", "could never be called"]),
    Case("cascade-that-never-escalates", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        "  models:\n    llama-3.1-8b:\n      cascade: {first: main, then: second, "
        "escalation: 0}\n")) + SECOND_POOL % "llama-3.1-8b", 19,
         "gateway.models.llama-3.1-8b.cascade.escalation", ["greater than 0"]),
    Case("length-split-no-prompt-reaches", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        SPLIT % 1000)) + SECOND_POOL % "llama-3.1-8b", 19,
         "gateway.models.llama-3.1-8b.by_prompt_length.threshold_tokens",
         ["no prompt reaches 1,000 tokens", "longest its streams send is 400",
          "'second' would never be used"]),
    Case("length-split-every-prompt-passes", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        SPLIT % 100)) + SECOND_POOL % "llama-3.1-8b", 19,
         "gateway.models.llama-3.1-8b.by_prompt_length.threshold_tokens",
         ["every prompt is at least 100 tokens", "'main' would never be used"]),
    Case("requests-per-min-below-one", edit(("requests_per_min: 600", "requests_per_min: 0.5")),
         16, "gateway.teams.search.requests_per_min", ["never lets a request through"]),
    Case("tokens-per-min-below-one-request", edit((
        "requests_per_min: 600", "tokens_per_min: 100")), 16,
         "gateway.teams.search.tokens_per_min",
         ["smallest request of stream 'chat' (150 tokens", "give at least 150"]),
    Case("token-budget-below-one-request", edit((
        "requests_per_min: 600", "budget: {tokens: 149, period: 1h}")), 16,
         "gateway.teams.search.budget.tokens", ["149 tokens is less than the smallest"]),
    Case("lognormal-prompts-all-past-the-context", stream_field(
        "prompt_tokens", "{type: lognormal, mean: 1000000, cv: 0.1}"), 7, STREAM,
         ["requests are longer than its pool serves", "at most 131,072 (its max_model_len)"]),
    Case("kv-cache-of-one-block", edit(("    tp: 1\n", "    tp: 1\n    kv_cache_bytes: "
                                        "2MiB\n")), 7, STREAM,
         ["at most 16 (a replica's whole KV cache)"]),
    Case("token-budget-below-every-prompt-without-chunking", edit((
        "      max_num_batched_tokens: 8192\n", "      max_num_batched_tokens: 128\n"
        "      max_num_seqs: 16\n      chunked_prefill: false\n")), 7, STREAM,
         ["at most 128 (max_num_batched_tokens without chunked prefill)"]),
]

# Engine presets: an unknown engine or version names the known ones; a scenario's own
# preset with a negative, missing or unsourced value is refused at its line and field.
TOY_PRESET = """\
engines:
  toy:
    default: a
    versions:
      a:
        describes: a test engine
        host_mode: {value: sync, source: an assumption for the test}
        host_constant_s: {value: 0.001, source: an assumption for the test}
        host_per_seq_s: {value: 1.0e-6, source: an assumption for the test}
        join: {value: next, source: an assumption for the test}
        multi_step: {value: 1, source: an assumption for the test}
        front_end_constant_s: {value: 0.004, source: an assumption for the test}
        front_end_per_prompt_token_s: {value: 1.0e-5, source: an assumption for the test}
        token_hop_s: {value: 0.001, source: an assumption for the test}
        kv_admission: {value: on_demand, source: an assumption for the test}
        prefill_only_steps: {value: false, source: an assumption for the test}
        finished_extra_steps: {value: 1, source: an assumption for the test}
"""
#  27 engines  28 toy  29 default  30 versions  31 a  32 describes  33 host_mode
#  34 host_constant_s  35 host_per_seq_s ... 40 token_hop_s  41 kv_admission
#  42 prefill_only_steps  43 finished_extra_steps
CASES += [
    Case("engine-unknown", append_to_pool("    engine: tgi\n"), 27, "pools.main.engine",
         ["unknown engine 'tgi'", "known engines: sglang, trtllm, vllm"]),
    Case("engine-unknown-version", append_to_pool("    engine: vllm@0.4\n"), 27,
         "pools.main.engine", ["unknown version '0.4' of engine 'vllm'", "vllm@v0",
                               "vllm@v0-multistep", "vllm@v1", "vllm@async",
                               "`engine: vllm` runs vllm@async"]),
    Case("engine-preset-negative-host-time", BASE + TOY_PRESET.replace(
        "{value: 0.001, source", "{value: -0.001, source"), 34,
        "engines.toy.versions.a.host_constant_s.value", ["greater than or equal to 0"]),
    Case("engine-preset-value-missing", BASE + TOY_PRESET.replace(
        "        token_hop_s: {value: 0.001, source: an assumption for the test}\n", ""), 31,
        "engines.toy.versions.a.token_hop_s", ["missing"]),
    Case("engine-preset-value-without-source", BASE + TOY_PRESET.replace(
        "join: {value: next, source: an assumption for the test}", "join: {value: next}"), 36,
        "engines.toy.versions.a.join.source", ["missing"]),
    Case("engine-preset-prefill-only-steps-not-a-flag", BASE + TOY_PRESET.replace(
        "prefill_only_steps: {value: false", "prefill_only_steps: {value: sometimes"), 42,
        "engines.toy.versions.a.prefill_only_steps.value", ["boolean"]),
    Case("engine-preset-negative-finished-extra-steps", BASE + TOY_PRESET.replace(
        "finished_extra_steps: {value: 1", "finished_extra_steps: {value: -1"), 43,
        "engines.toy.versions.a.finished_extra_steps.value", ["0 or 1"]),
    Case("engine-preset-finished-extra-steps-missing", BASE + TOY_PRESET.replace(
        "        finished_extra_steps: {value: 1, source: an assumption for the test}\n", ""),
        31, "engines.toy.versions.a.finished_extra_steps", ["missing"]),
    Case("engine-preset-default-not-a-version", BASE + TOY_PRESET.replace(
        "default: a", "default: b"), 28, "engines.toy", ["default version 'b' is not one of a"]),
]

# Steps, starts and transfers that would take hours: a cost model, a link or a weight
# load set far from any real engine (checked once the pools are built).
CASES += [
    Case("step-overhead-of-a-day", append_to_pool(
        "    cost_model: {type: roofline, step_overhead: 1d}\n"), 18, "pools.main",
         ["a prefill of 1,000 prompt tokens would take 8.64e+04 s", "real engines take "
          "milliseconds"]),
    Case("flops-efficiency-one-in-a-trillion", append_to_pool(
        "    cost_model: {type: roofline, flops_efficiency: 1e-12, "
        "quantized_flops_efficiency: 1e-12}\n"), 18, "pools.main", ["would take"]),
    Case("hardware-of-one-flop-a-second", after_duration(
        "hardware:\n  slow:\n    name: slow\n    memory: 80GiB\n    hbm_bandwidth: 1B/s\n"
        "    flops: {bf16: 1}\n    interconnect_bandwidth: 1GB/s\n"
        "    price_per_gpu_hour: {on_demand: 1}"
        ).replace("hardware: H100-SXM", "hardware: slow"), 26, "pools.main",
         ["would take", "check the hardware's flops and bandwidths"]),
    Case("weights-loaded-at-one-byte-a-second", append_to_pool(
        "    cold_start: {load_bandwidth: 1B/s}\n    autoscaler: {type: target, metric: "
        "queue_per_replica, target: 4, max_replicas: 4}\n"), 27, "pools.main.cold_start",
         ["s to start (provisioning + weights / load_bandwidth)", "could never add one"]),
    Case("schedule-row-shorter-than-the-cold-start", append_to_pool(
        "    cold_start: {provisioning: 5s, load_bandwidth: 10GB/s}\n    autoscaler: {type: "
        "scheduled, period: 10s, table: [[0, 0], [3, 2], [6, 0]]}\n"), 28,
         "pools.main.autoscaler.table[1]",
         ["row 1 adds replicas (0 -> 2) for 3 s (row 2 asks for 0)", "stopped before ever"]),
    Case("decode-pool-shorter-than-its-prefill-pool", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        "  models:\n    llama-3.1-8b:\n      disaggregated: {prefill: main, decode: second}\n"))
         + SECOND_POOL % "llama-3.1-8b" + "    max_model_len: 4096\n", 33,
         "pools.second.max_model_len",
         ["decode pool 'second' takes contexts of up to 4,096 tokens, prefill pool 'main' up "
          "to 131,072", "give both pools the same max_model_len"]),
    Case("kv-link-of-one-byte-a-second", edit((GATEWAY_MODELS[0], GATEWAY_MODELS[0] +
        "  models:\n    llama-3.1-8b:\n      disaggregated: {prefill: main, decode: second, "
        "link_bandwidth: 1B/s}\n")) + SECOND_POOL % "llama-3.1-8b", 19,
         "gateway.models.llama-3.1-8b.disaggregated.link_bandwidth",
         ["KV cache of a 1,000-token prompt would take", "raise link_bandwidth"]),
    Case("queue-capacity-that-never-sheds", append_to_pool("    queue: {capacity: 10}\n"), 27,
         "pools.main.queue.capacity", ["every request goes to a replica at once"]),
    Case("sizing-past-the-fleet-bound", append_to_pool("    sizing: {max_replicas: 100000}\n"),
         27, "pools.main.sizing.max_replicas", ["size may try 100,000 replicas",
                                                "the most simulated at once is 20,000"]),
    Case("sizing-floor-over-the-cap", append_to_pool(
        "    sizing: {min_replicas: 5, max_replicas: 4}\n"), 27, "pools.main.sizing",
         ["min_replicas (5) exceeds max_replicas (4)"]),
    Case("sizing-an-unknown-kv-dtype", append_to_pool("    sizing: {kv_dtype: [bf16, fp9]}\n"),
         27, "pools.main.sizing.kv_dtype[1]", ["'bf16'", "'fp8'", "did you mean 'fp8'?"]),
    Case("sizing-an-unknown-gpu", append_to_pool("    sizing: {hardware: [H999, H200]}\n"),
         27, "pools.main.sizing.hardware[0]", ["unknown hardware 'H999'", "H100-SXM"]),
    Case("sizing-a-tp-that-splits-no-heads", append_to_pool("    sizing: {tp: [1, 3]}\n"),
         27, "pools.main.sizing.tp[1]", ["tp=3 does not divide", "valid: 1, 2, 4, 8"]),
    # -- pipeline stages (pp) ---------------------------------------------------------------
    Case("pp-zero", edit(("    tp: 1\n", "    tp: 1\n    pp: 0\n")), 22, "pools.main.pp",
         ["greater than 0"]),
    Case("pp-not-a-number", edit(("    tp: 1\n", "    tp: 1\n    pp: x\n")), 22,
         "pools.main.pp", ["valid integer"]),
    Case("pp-more-stages-than-layers", edit(("    tp: 1\n", "    tp: 1\n    pp: 33\n")), 22,
         "pools.main.pp", ["pp=33 exceeds llama-3.1-8b's 32 layers",
                           "each pipeline stage holds at least one layer"]),
    Case("pp-across-nodes-without-a-network",
         edit(("hardware: H100-SXM", "hardware: L40S"),
              ("    tp: 1\n", "    tp: 8\n    pp: 2\n")), 22, "pools.main.pp",
         ["tp x pp = 16 GPUs span 2 nodes of 8 L40S", "no internode_bandwidth"]),
    Case("sizing-more-stages-than-layers", append_to_pool("    sizing: {pp: [1, 40]}\n"),
         27, "pools.main.sizing.pp[1]", ["pp=40 exceeds llama-3.1-8b's 32 layers"]),
    Case("sizing-pp-of-zero", append_to_pool("    sizing: {pp: [0, 2]}\n"),
         27, "pools.main.sizing.pp[0]", ["greater than 0"]),
    Case("pp-more-stages-than-the-draft-models-layers", edit(
        ("    tp: 1\n", "    tp: 1\n    pp: 9\n"),
        ("      type: continuous\n      max_num_batched_tokens: 8192\n",
         "      type: speculative\n      draft_model: tiny-llama\n"
         "      acceptance_rate: 0.5\n")), 22, "pools.main.pp",
         ["pp=9 exceeds the draft model tiny-llama's 8 layers",
          "split over the same pipeline stages"]),
    Case("pp-on-a-disaggregated-decode-pool", edit(
        (GATEWAY_MODELS[0], GATEWAY_MODELS[1] % "second"))
         + SECOND_POOL % "llama-3.1-8b" + "    pp: 2\n", 33, "pools.second.pp",
         ["pool 'second' decodes for 'llama-3.1-8b' (disaggregated) with pp=2",
          "NixlConnector", "does not support pipeline stages on the decode side"]),
    Case("sizing-pp-on-a-disaggregated-decode-pool", edit(
        (GATEWAY_MODELS[0], GATEWAY_MODELS[1] % "second"))
         + SECOND_POOL % "llama-3.1-8b" + "    sizing: {pp: [1, 2]}\n", 33,
         "pools.second.sizing.pp[1]",
         ["pool 'second' decodes for 'llama-3.1-8b' (disaggregated) with pp=2",
          "list only pp: [1] under sizing"]),
    Case("sizing-pp-past-the-draft-models-layers", edit(
        ("      type: continuous\n      max_num_batched_tokens: 8192\n",
         "      type: speculative\n      draft_model: tiny-llama\n"
         "      acceptance_rate: 0.5\n")) + "    sizing: {pp: [1, 4, 9]}\n", 28,
         "pools.main.sizing.pp[2]",
         ["pp=9 exceeds the draft model tiny-llama's 8 layers", "try at most pp=8"]),
    Case("pp-no-room-hint-names-no-tp-its-stages-cannot-reach", edit(
        ("    model: llama-3.1-8b\n    hardware: H100-SXM",
         "    model: llama-3.1-405b\n    hardware: L40S\n    weight_dtype: fp8"),
        ("      model: llama-3.1-8b\n", "      model: llama-3.1-405b\n"),
        ("    tp: 1\n", "    tp: 4\n    pp: 2\n")), 22, "pools.main.tp",
         ["47.7 GiB per GPU at tp=4, pp=2", "leaves no room for a KV cache",
          "no tp up to the 8 GPUs of one L40S node that places its 2 stages in one node"],
         absent=["it fits at tp=8"]),
    Case("chunk-cap-without-chunking", edit((
        "      max_num_batched_tokens: 8192\n", "      max_num_batched_tokens: 8192\n"
        "      chunked_prefill: false\n      long_prefill_token_threshold: 512\n")), 23,
         "pools.main.scheduler", ["chunked_prefill: false takes none"]),
    Case("chunk-cap-above-the-budget", edit((
        "      max_num_batched_tokens: 8192\n", "      max_num_batched_tokens: 8192\n"
        "      long_prefill_token_threshold: 100000\n")), 23, "pools.main.scheduler",
         ["would never cap a chunk"]),
    Case("max-new-tokens-for-an-admission-that-never-reads-it", edit((
        "      max_num_batched_tokens: 8192\n", "      max_num_batched_tokens: 8192\n"
        "      max_new_tokens: 1024\n")), 26, "pools.main.scheduler.max_new_tokens",
         ["admits on_demand (engine vllm@async)", "kv_admission: estimated_output"]),
    Case("static-batch-waiting-past-the-last-arrival", edit((
        "      type: continuous\n      max_num_batched_tokens: 8192\n",
        "      type: static\n      batch_timeout: 30s\n")), 25,
         "pools.main.scheduler.batch_timeout",
         ["would wait 30 s, past the last arrival (duration 20 s)", "shorten batch_timeout"]),
    Case("front-end-of-an-hour", append_to_pool("    front_end: 1h\n"), 27,
         "pools.main.front_end", ["less than or equal to 60"]),
    Case("ngram-proposer-of-a-minute", edit((
        "      type: continuous\n      max_num_batched_tokens: 8192\n",
        "      type: speculative\n      proposer: ngram\n      acceptance_rate: 0.5\n"
        "      ngram_cost_s: 1min\n")), 27, "pools.main.scheduler.ngram_cost_s",
         ["less than or equal to 10"]),
]

# What a fresh attacker found after the catalogue above: settings that would be ignored or
# lie, and documents or values too large to read in bounded time.
STATIC = ("      type: continuous\n      max_num_batched_tokens: 8192\n",
          "      type: static\n      batch_timeout: %s\n")
CASES += [
    Case("yes-as-a-boolean", BASE + "record_steps: yes\n", 27, "record_steps",
         ["expected true or false (got 'yes')"]),
    Case("one-as-a-boolean", edit(("      max_num_batched_tokens: 8192\n",
                                   "      max_num_batched_tokens: 8192\n      chunked_prefill: 1\n")),
         26, "pools.main.scheduler.chunked_prefill", ["expected true or false"]),
    Case("full-width-digits-in-a-duration", edit(("duration: 20s", "duration: \uff12\uff10s")), 3,
         "duration", ["cannot read", "as a duration"]),
    Case("a-description-of-a-megabyte", edit(("name: robust\n", "name: robust\ndescription: "
                                              + "x" * 1_000_000 + "\n")), 2, "description",
         ["at most 10000 characters"], absent=["x" * 100]),
    Case("a-list-of-two-hundred-thousand-values", BASE + "extra: [" + "1," * 200_000 + "1]\n",
         27, None, ["more than 100,000 values", "trace file"]),
    Case("a-scenario-of-nine-mebibytes", BASE + "#" + "x" * (9 * 2**20) + "\n", None, None,
         ["at most 8.0 MiB"]),
    Case("lognormal-clipped-by-a-tiny-max", stream_field(
        "prompt_tokens", "{type: lognormal, mean: 1000, cv: 0.5, max: 10}"), 11,
         f"{STREAM}.prompt_tokens", ["max (10) is below the median", "more than half"]),
    Case("exponential-clipped-by-a-large-min", stream_field(
        "output_tokens", "{type: exponential, mean: 10, min: 100}"), 12,
         f"{STREAM}.output_tokens", ["min (100) is above the median", "more than half"]),
    Case("cold-start-on-a-fixed-pool", append_to_pool("    cold_start: {provisioning: 30s}\n"),
         27, "pools.main.cold_start", ["every replica of a pool of fixed size is up"]),
    Case("spot-replicas-billed-on-demand", append_to_pool(
        "    spot: {preemptions_per_hour: 1}\n    autoscaler: {type: target, metric: "
        "queue_per_replica, target: 4, min_replicas: 1, max_replicas: 4}\n"), 18,
         "pools.main.pricing", ["billed at the on_demand price", "pricing: spot"]),
    Case("pricing-beside-a-price-that-overrides-it", append_to_pool(
        "    pricing: spot\n    price_per_gpu_hour: 2\n"), 27, "pools.main.pricing",
         ["overrides the hardware's prices", "give one of them"]),
    Case("static-batch-timeout-past-the-run", edit((STATIC[0], STATIC[1] % "1min")), 25,
         "pools.main.scheduler.batch_timeout", ["past the last arrival"]),
    Case("closed-loop-pause-as-long-as-the-run", stream_field(
        "arrival", "{type: closed, concurrency: 2, requests: 10, think_time: 30s}"), 10,
         f"{STREAM}.arrival.think_time", ["each of the 2 clients would send one request"]),
]

# A second fresh attacker's findings: settings that would be ignored, names that read
# alike, and data files whose sizes or lines the scenario hides.
CASES += [
    Case("kv-bytes-beside-a-memory-share", append_to_pool(
        "    kv_cache_bytes: 10GiB\n    gpu_memory_utilization: 0.5\n"), 28,
         "pools.main.gpu_memory_utilization", ["give one of them"]),
    Case("an-ngram-cost-for-a-draft-model", edit((
        "      type: continuous\n      max_num_batched_tokens: 8192\n",
        "      type: speculative\n      proposer: draft_model\n      draft_model: tiny-llama\n"
        "      acceptance_rate: 0.5\n      ngram_cost_s: 1ms\n")), 23, "pools.main.scheduler",
         ["only used with proposer: ngram"]),
    Case("a-scale-to-zero-grace-that-never-applies", append_to_pool(
        "    autoscaler: {type: target, metric: queue_per_replica, target: 4, min_replicas: 1,"
        " max_replicas: 3, scale_to_zero_grace: 10s}\n"), 27, "pools.main.autoscaler",
         ["only with min_replicas: 0"]),
    Case("two-pools-named-apart-only-by-case", BASE + SECOND_POOL.replace("second", "Main")
         % "llama-3.1-8b", 27, "pools.Main", ["differs from 'main' only in case"]),
    Case("a-team-name-with-a-cyrillic-letter", edit(("      team: search\n",
                                                     "      team: s\u0435arch\n")), 8,
         f"{STREAM}.team", ["may not mix Cyrillic and Latin letters"]),
    Case("a-line-separator-in-a-description", edit(("name: robust\n",
                                                    "name: robust\ndescription: \"a\u2028b\"\n")),
         2, None, ["line or paragraph separator", "#x2028"]),
    Case("a-trace-longer-than-max-requests", edit(("seed: 1\n", "seed: 1\nmax_requests: 10\n"),
                                                  base=trace_stream()),
         13, None, ["more than 10 rows before the run's end", "max_requests = 10"],
         where="t.csv", files={"t.csv": TRACE_HEADER + "".join(f"{i * 0.1:.1f},100,10\n" for i in range(20))}),
    Case("a-quoted-trace-field-over-lines", trace_stream(), 7, None,
         ["column 'prompt_tokens': not a finite number"], where="t.csv",
         files={"t.csv": "timestamp,prompt_tokens,output_tokens,note\n0,10,5,\"a\nb\nc\nd\"\n"
                         "1,11,5,x\n2,abc,5,x\n"}),
    Case("three-pools-of-eight-thousand-replicas", edit(("    replicas: 1\n",
                                                         "    replicas: 8000\n"))
         + (SECOND_POOL % "llama-3.1-8b") + "    replicas: 8000\n"
         + (SECOND_POOL.replace("second", "third") % "llama-3.1-8b") + "    replicas: 8000\n",
         17, "pools", ["may hold 24,000 replicas together", "20,000"]),
    Case("samples-of-three-pools-past-the-budget", edit(
        ("sample_interval: 1s", "sample_interval: 2ms")) + (SECOND_POOL % "llama-3.1-8b")
         + (SECOND_POOL.replace("second", "third") % "llama-3.1-8b"), 4, "sample_interval",
         ["one per pool per interval", "the most is 2,000,000"]),
    Case("a-team-name-with-a-trailing-space", edit(("      team: search\n",
                                                    "      team: 'search '\n")), 8,
         f"{STREAM}.team", ["may not start or end with spaces"]),
    Case("an-inline-model-of-no-weights", after_duration(
        "models:\n  m0:\n    name: m0\n    num_layers: 2\n    hidden_size: 64\n"
        "    num_heads: 4\n    num_kv_heads: 4\n    head_dim: 16\n    ffn_size: 128\n"
        "    vocab_size: 100\n    weights: 0"), 14, "models.m0.weights",
         ["greater than 0"]),
    Case("a-gpu-profile-measured-on-another-gpu", append_to_pool(
        "    cost_model: {type: calibrated, profile: "
        "calibrated/gpu/h200/vllm/llama-3.1-8b-tp1-bf16.yaml}\n"), 27,
         "pools.main.cost_model.profile", ["measured on H200", "hardware is H100-SXM"]),
    Case("a-calibrated-profile-nested-20000-deep", append_to_pool(
        "    cost_model: {type: calibrated, profile: p.yaml}\n"), 27,
         "pools.main.cost_model.profile", ["p.yaml is nested too deeply"], files={"p.yaml": "model: " + "[" * 20000 + "]" * 20000 + "\n"}),
]

# JSON-lines traces (format mooncake): a line too long for a row is not called a CSV, and
# a field an object names twice is refused (json.loads kept the last value).
MOONCAKE = edit((POISSON_LINES, "      arrival: {type: trace, path: m.jsonl, format: mooncake}\n"))
MOONCAKE_ROW = '{"timestamp": 0, "input_length": 50, "output_length": 5}\n'
CASES += [
    Case("a-jsonl-trace-line-of-70-kib", MOONCAKE, 2, None,
         ["a line is longer than 64 KiB: not a row of a JSON-lines trace"], where="m.jsonl",
         files={"m.jsonl": MOONCAKE_ROW + '{"timestamp": 1, "input_length": 5, '
                           '"output_length": 2, "note": "' + "a" * 70000 + '"}\n'},
         absent=["CSV", "aaaa"]),
    Case("a-jsonl-trace-row-naming-a-field-twice", MOONCAKE, 2, None,
         ["field 'input_length': given twice in the object"], where="m.jsonl",
         files={"m.jsonl": MOONCAKE_ROW + '{"timestamp": 1, "input_length": 5, '
                           '"input_length": 6, "output_length": 2}\n'}),
]

# Sessions: conversations start at a poisson or gamma stream's arrivals, with a bounded
# number of turns; a trace's block length belongs to the Mooncake format.
CASES += [
    Case("sessions-with-unbounded-turns",
         after_team("sessions: {turns: {type: exponential, mean: 4}}"), 9,
         f"{STREAM}.sessions.turns", ["at most 1,000 turns", "give the distribution a max"]),
    Case("sessions-of-too-many-turns", after_team("sessions: {turns: 5000}"), 9,
         f"{STREAM}.sessions.turns", ["at most 1,000 turns", "it may draw 5,000"]),
    Case("sessions-on-a-closed-loop-stream",
         edit(("      arrival: {type: poisson, rate: 2/s}\n",
               "      arrival: {type: closed, concurrency: 2, requests: 10}\n"
               "      sessions: {turns: 3}\n")), 7, STREAM,
         ["conversations start at a poisson or gamma stream's arrivals"]),
    Case("sessions-whose-first-turn-never-fits",
         after_team("sessions: {turns: 3, first_prompt_tokens: {type: fixed, value: 5000}, "
                    "max_context_tokens: 4000}"), 9,
         f"{STREAM}.sessions.max_context_tokens",
         ["every conversation would end before its first turn", "at least 5,050 tokens"]),
    Case("a-workload-that-draws-no-request",
         edit(("rate: 2/s}", "rate: 0.0005/s}")), 6, "workload.streams",
         ["no stream draws a request over the run (20 s", "every figure would be empty"]),
    Case("sessions-with-a-tiny-context-window",
         after_team("sessions: {turns: 3, max_context_tokens: 1}"), 9,
         f"{STREAM}.sessions.max_context_tokens", ["greater than or equal to 2"]),
    Case("sessions-with-negative-think-time",
         after_team("sessions: {turns: 3, think_time: -5s}"), 9,
         f"{STREAM}.sessions.think_time", ["-5"]),
    Case("block-tokens-on-a-csv-trace", edit(
        (POISSON_LINES, "      arrival: {type: trace, path: t.csv, block_tokens: 64}\n")),
         10, f"{STREAM}.arrival", ["`block_tokens:` is the length of the blocks a Mooncake"]),
]

# Compressed inputs read by what they hold, and numbers written as text: a gzip of a few
# MB that inflates to a row and a billion blank lines is refused in its first block, a
# gzip of repeated text before it is inflated whole; a token count in quotes is text
def _gzip(data: bytes) -> bytes:
    import gzip
    return gzip.compress(data, compresslevel=9, mtime=0)


CASES += [
    Case("a-gzip-trace-of-blank-lines", trace_stream("t.csv.gz"), None, None,
         ["holds more than 1,000,000 blank lines among its first", "not a CSV of numbers"],
         where="t.csv.gz",
         files={"t.csv.gz": _gzip(TRACE_HEADER.encode() + b"0,10,5\n" + b"\n" * 3_000_000)}),
    Case("a-csv-trace-of-blank-lines", trace_stream("t.csv"), None, None,
         ["holds more than 1,000,000 blank lines"], where="t.csv",
         files={"t.csv": TRACE_HEADER + "0,10,5\n" + " \r\n" * 1_100_000}),
    Case("a-jsonl-gzip-trace-of-blank-lines", edit((POISSON_LINES,
         "      arrival: {type: trace, path: m.jsonl.gz, format: mooncake}\n")), None, None,
         ["holds more than 1,000,000 blank lines",
          "not a row of a JSON-lines trace"], where="m.jsonl.gz",
         files={"m.jsonl.gz": _gzip(MOONCAKE_ROW.encode() + b"\n" * 3_000_000)}),
    Case("a-gzip-trace-of-repeated-rows", trace_stream("t.csv.gz"), None, None,
         ["decompresses to more than", "over 100 times its", "repeated text, not a trace"],
         where="t.csv.gz",
         files={"t.csv.gz": _gzip(TRACE_HEADER.encode() + b"0,10,5\n" * 12_000_000)}),
    Case("a-jsonl-token-count-in-quotes", MOONCAKE, 2, None,
         ["field 'input_length': not a JSON number (got str; write it without quotes)"],
         where="m.jsonl",
         files={"m.jsonl": MOONCAKE_ROW + '{"timestamp": 1, "input_length": "1_000", '
                                          '"output_length": 5}\n'}),
    Case("a-token-count-in-quotes", edit(("value: 50}", 'value: "1_000"}')), 12,
         f"{STREAM}.output_tokens.value",
         ["expected a number, got the text '1_000': write it without quotes"]),
    Case("sizing-an-empty-hardware-list", append_to_pool("    sizing: {hardware: []}\n"), 27,
         "pools.main.sizing.hardware", ["an empty list: size would have nothing to try",
                                        "leave the field out for the pool's own setting"]),
    Case("sizing-an-empty-tp-list", append_to_pool("    sizing: {tp: [], max_replicas: 4}\n"),
         27, "pools.main.sizing.tp", ["an empty list"]),
    Case("a-served-model-for-no-team", edit(("gateway:\n", "gateway:\n  models:\n"
                                              "    llama-3.1-8b: {pools: {main: 1.0}, "
                                              "teams: []}\n")), 15,
         "gateway.models.llama-3.1-8b.teams", ["at least 1 item"]),
    Case("a-count-in-quotes", edit(("    replicas: 1\n", '    replicas: "3"\n')), 22,
         "pools.main.replicas", ["expected a number, got the text '3'"]),
]

assert len(CASES) >= 30
assert len({c.id for c in CASES}) == len(CASES)


def location(path: Path, line: int | None) -> re.Pattern:
    """``path:line:`` (an optional ``:column`` after the line), or ``path:`` alone."""
    where = re.escape(str(path)) + (rf":{line}(:\d+)?" if line is not None else "")
    return re.compile(rf"(^|\n)error: {where}: ")


def run_main(args: list[str]) -> int:
    """``sim.cli.main``, with argparse's SystemExit turned into its exit code.

    Any other exception escapes (the real CLI would print a traceback, exit 1).
    """
    try:
        return main(args)
    except SystemExit as exc:
        return exc.code


def write_case(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / "s.yaml"
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text, encoding="utf-8")
    for name, content in case.files.items():
        target = tmp_path / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return path


def _params():
    for case in CASES:
        marks = ([pytest.mark.xfail(strict=True, raises=AssertionError, reason=case.xfail)]
                 if case.xfail else [])
        yield pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_bad_input_is_a_located_error_with_exit_2(tmp_path, capsys, case):
    path = write_case(tmp_path, case)
    out = tmp_path / "out"
    code = run_main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: "), err
    assert all(line.startswith("error: ") for line in err.splitlines()), err
    assert "Traceback" not in err
    assert location(tmp_path / case.where, case.line).search(err), err
    if case.field is not None:
        assert f": {case.field}: " in err, err
    for fragment in case.fragments:
        assert fragment in err, (fragment, err)
    for fragment in case.absent:
        assert fragment not in err, (fragment, err)
    assert not out.exists()


def test_the_base_scenario_is_good(tmp_path, capsys):
    """The catalogue's edits start from a scenario that runs."""
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    assert run_main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert (tmp_path / "out" / "summary.json").is_file()
    assert capsys.readouterr().err == ""


def test_trace_beside_the_scenario_is_found_from_any_working_directory(tmp_path, monkeypatch,
                                                                       capsys):
    """The trace cases above fail for their content, not their path: a good trace runs."""
    path = write_case(tmp_path, Case("good-trace", trace_stream(), None, None, [],
                                     files={"t.csv": TRACE_HEADER + "0,10,5\n1,20,6\n"}))
    monkeypatch.chdir(tmp_path.parent)
    assert run_main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0


# -- units that are accepted -----------------------------------------------------------------

ACCEPTED_UNITS = [
    # (edit of BASE, attribute path in the loaded scenario, expected SI value)
    (("duration: 20s", "duration: 2s"), "duration", 2.0),
    (("duration: 20s", "duration: 1.5min"), "duration", 90.0),
    (("sample_interval: 1s", "sample_interval: 50ms"), "sample_interval", 0.05),
    (("rate: 2/s", "rate: 3/s"), "workload.streams.chat.arrival.rate.value", 3.0),
    (("rate: 2/s", "rate: 180/min"), "workload.streams.chat.arrival.rate.value", 3.0),
    (("rate: 2/s", "rate: 2.5"), "workload.streams.chat.arrival.rate.value", 2.5),
    (("gateway:\n", "gateway:\n  models:\n    small: {pools: {main: 1.0}, min_gpu_memory: 80GB}\n"),
     "gateway.models.small.min_gpu_memory", 80e9),
    (("    tp: 1\n", "    tp: 1\n    activation_reserve: 2GiB\n"), "pools.main.activation_reserve",
     2 * 2**30),
    (("    tp: 1\n", "    tp: 1\n    kv_cache_bytes: 8GiB\n"), "pools.main.kv_cache_bytes",
     8 * 2**30),
    (("    tp: 1\n", "    tp: 1\n    kv_cache_bytes: 2.5e9\n"), "pools.main.kv_cache_bytes", 2.5e9),
    (("    tp: 1\n", "    tp: 1\n    cold_start: {provisioning: 2s, load_bandwidth: 3.35TB/s}\n"
                   "    autoscaler: {type: target, metric: queue_per_replica, target: 4, "
                   "max_replicas: 2}\n"), "pools.main.cold_start.load_bandwidth", 3.35e12),
]


def _attr(obj, dotted: str):
    for part in dotted.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


@pytest.mark.parametrize("change,attr,expected", ACCEPTED_UNITS,
                         ids=[c[0][1].strip().replace(" ", "") for c in ACCEPTED_UNITS])
def test_units_are_accepted_where_documented(tmp_path, capsys, change, attr, expected):
    path = tmp_path / "s.yaml"
    path.write_text(edit(change))
    scenario = sim.load_scenario(path)
    assert _attr(scenario, attr) == pytest.approx(expected, rel=1e-12)
    assert run_main(["lint", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: ok"


def test_units_scenario_runs(tmp_path):
    """A scenario written with units throughout runs and reports the parsed values."""
    path = tmp_path / "s.yaml"
    path.write_text(edit(("duration: 20s", "duration: 2s"),
                         ("sample_interval: 1s", "sample_interval: 50ms"),
                         ("rate: 2/s", "rate: 3/s"),
                         ("    tp: 1\n", "    tp: 1\n    kv_cache_bytes: 8GB\n")))
    assert run_main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["duration_s"] == 2.0


# -- the command line ------------------------------------------------------------------------

@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    return path


@pytest.mark.parametrize("value,fragments", [
    ("nonsense", ["cannot read 'nonsense' as a duration", "'min'"]),
    ("0", ["must be greater than 0"]),
    ("2 parsecs", ["cannot read '2 parsecs' as a duration"]),
])
def test_duration_flag_nonsense_exits_2(tmp_path, capsys, good, value, fragments):
    code = run_main(["run", str(good), "--duration", value, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: argument --duration: " in err
    for fragment in fragments:
        assert fragment in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_duration_flag_with_units_is_accepted(tmp_path, good):
    out = tmp_path / "out"
    assert run_main(["run", str(good), "--duration", "5s", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["duration_s"] == 5.0


def test_seed_flag_not_an_integer_exits_2(tmp_path, capsys, good):
    code = run_main(["run", str(good), "--seed", "abc", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "argument --seed: invalid int value: 'abc'" in err
    assert not (tmp_path / "out").exists()


def test_negative_seed_flag_is_a_clear_error(tmp_path, capsys, good):
    code = run_main(["run", str(good), "--seed", "-1", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "seed" in err and "-1" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_existing_output_folder_needs_force(tmp_path, capsys, good):
    out = tmp_path / "out"
    assert run_main(["run", str(good), "--out", str(out), "--quiet"]) == 0
    (out / "summary.json").write_text("from an older run")
    code = run_main(["run", str(good), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {out}: ")
    assert "exists; pass --force to replace it" in err
    assert (out / "summary.json").read_text() == "from an older run"
    assert run_main(["run", str(good), "--out", str(out), "--quiet", "--force"]) == 0
    assert (out / "summary.json").read_text() != "from an older run"


def test_force_never_replaces_a_folder_fleetsim_did_not_write(tmp_path, capsys, good):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    code = run_main(["run", str(good), "--out", str(out), "--quiet", "--force"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {out}: ") and "did not write" in err
    assert (out / "keep.txt").read_text() == "precious"


def test_empty_existing_output_folder_is_used(tmp_path, good):
    out = tmp_path / "out"
    out.mkdir()
    assert run_main(["run", str(good), "--out", str(out), "--quiet"]) == 0
    assert (out / "summary.json").is_file()


def test_output_path_that_is_a_file_is_a_clear_error(tmp_path, capsys, good):
    target = tmp_path / "afile"
    target.write_text("x")
    code = run_main(["run", str(good), "--out", str(target), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {target}: ") and "not a folder" in err
    assert target.read_text() == "x"


@pytest.mark.parametrize("command", ["run", "lint"])
def test_scenario_file_that_does_not_exist(tmp_path, capsys, command):
    path = tmp_path / "nope.yaml"
    assert run_main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and "cannot read file" in err
    assert "Traceback" not in err


def test_scenario_path_that_is_a_folder(tmp_path, capsys):
    assert run_main(["run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}: ") and "cannot read file" in err


def test_lint_reports_every_bad_file_and_exits_2(tmp_path, capsys):
    """`lint` stops at the first bad file with the same located error."""
    good_path, bad_path = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good_path.write_text(BASE)
    bad_path.write_text(edit(("    replicas: 1", "    replicsa: 1")))
    assert run_main(["lint", str(good_path), str(bad_path)]) == 2
    captured = capsys.readouterr()
    assert f"{good_path}: ok" in captured.out
    assert captured.err.startswith(f"error: {bad_path}:22: pools.main.replicsa: unknown key")


@pytest.mark.parametrize("case", [c for c in CASES if c.xfail is None], ids=lambda c: c.id)
def test_lint_refuses_what_run_refuses(tmp_path, capsys, case):
    """`lint` goes as far as a run does before its first event (data files read,
    arrivals drawn, pools built): every case of the catalogue fails there alike."""
    path = write_case(tmp_path, case)
    assert run_main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert location(tmp_path / case.where, case.line).search(err), err
    assert all(fragment in err for fragment in case.fragments), err


def test_lint_checks_that_a_trace_file_exists(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(trace_stream("no-such-trace.csv"))
    assert run_main(["lint", str(path)]) == 2
    assert "no-such-trace.csv" in capsys.readouterr().err


def test_missing_trace_names_the_scenario_line_that_refers_to_it(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(trace_stream("no-such-trace.csv"))
    assert run_main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:10: workload.streams.chat.arrival.path: " in err, err


def test_bad_input_in_a_subprocess_has_no_traceback(tmp_path):
    """The real entry point: one located line on stderr, exit 2."""
    import subprocess
    import sys
    path = tmp_path / "s.yaml"
    path.write_text(edit(("type: poisson", "type: poison")))
    proc = subprocess.run([sys.executable, "-m", "sim", "run", str(path), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path}:10: workload.streams.chat.arrival.type: ")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# -- bad command lines around a good scenario ---------------------------------------------------
# (case id, argv after the command with {s} for the scenario and {d} for the folder, stderr
# fragments): each exits 2 with a located message before any simulation runs.
ARGV_CASES = [
    ("sweep-empty-vary", ["sweep", "{s}", "--vary", "", "--out", "{d}/o"], ["--vary"]),
    ("sweep-vary-no-values", ["sweep", "{s}", "--vary", "pools.main.replicas=", "--out", "{d}/o"],
     ["no values"]),
    ("sweep-vary-empty-range", ["sweep", "{s}", "--vary", "pools.main.replicas=5..1",
                                "--out", "{d}/o"], ["the range is empty"]),
    ("sweep-range-of-a-hundred-million", ["sweep", "{s}", "--vary",
                                          "pools.main.replicas=1..100000000", "--out", "{d}/o"],
     ["100,000,000 values", "at most 10,000"]),
    ("sweep-grid-too-large", ["sweep", "{s}", "--vary", "pools.main.replicas=1..200",
                              "--vary", "seed=1..100", "--out", "{d}/o"],
     ["20,000 scenarios"]),
    ("sweep-vary-unknown-field", ["sweep", "{s}", "--vary", "pools.main.replica=1,2",
                                  "--out", "{d}/o"], ["replica", "did you mean 'replicas'"]),
    ("size-negative-slo", ["size", "{s}", "--slo", "ttft_p99=-1s", "--out", "{d}/o"],
     ["greater than 0"]),
    ("size-zero-slo", ["size", "{s}", "--slo", "tpot_p99=0ms", "--out", "{d}/o"],
     ["greater than 0"]),
    ("size-infinite-slo", ["size", "{s}", "--slo", "ttft_p99=inf", "--out", "{d}/o"], ["--slo"]),
    ("size-attainment-above-one", ["size", "{s}", "--slo", "attainment=1.5", "--out", "{d}/o"],
     ["(0, 1]"]),
    ("size-unknown-slo-metric", ["size", "{s}", "--slo", "ttft_p42=1s", "--out", "{d}/o"],
     ["unknown metric"]),
    ("size-no-slo", ["size", "{s}", "--out", "{d}/o"], ["give at least one --slo"]),
    ("size-slo-without-a-unit", ["size", "{s}", "--slo", "tpot_p99=50", "--out", "{d}/o"],
     ["--slo 'tpot_p99=50'", "50 has no unit", "50ms", "50s"]),
    ("check-slo-without-a-unit", ["check", "{s}", "--baseline", "{d}/b.json", "--slo",
                                  "ttft_p99=2"], ["2 has no unit", "2ms", "2s"]),
    ("run-set-slo-without-a-unit", ["run", "{s}", "--set", "slos={{tpot_p99: 50}}", "--out",
                                    "{d}/o"], ["slos.tpot_p99", "50 has no unit", "50ms"]),
    ("check-baseline-is-a-folder", ["check", "{s}", "--baseline", "{d}"], ["is a folder"]),
    ("run-out-below-a-file", ["run", "{s}", "--out", "{s}/sub"], ["is a file, not a folder"]),
    ("run-set-unknown-field", ["run", "{s}", "--set", "pools.main.tpp=2", "--out", "{d}/o"],
     ["did you mean 'tp'"]),
    ("size-same-slo-twice", ["size", "{s}", "--slo", "ttft_p99=2s", "--slo", "ttft_p99=1s",
                             "--out", "{d}/o"], ["--slo ttft_p99: given twice"]),
    ("run-set-no-field", ["run", "{s}", "--set", "=5", "--out", "{d}/o"],
     ["--set '=5'", "PATH=VALUE"]),
    ("sweep-vary-empty-value", ["sweep", "{s}", "--vary", "seed=1,,2", "--out", "{d}/o"],
     ["an empty value between commas"]),
    ("sweep-vary-no-field", ["sweep", "{s}", "--vary", "=1,2", "--out", "{d}/o"],
     ["no field before '='"]),
    ("sweep-same-field-twice", ["sweep", "{s}", "--vary", "seed=1,2", "--vary", "seed=3,4",
                                "--out", "{d}/o"], ["given twice"]),
    ("sweep-page-over-its-table", ["sweep", "{s}", "--vary", "seed=1,2", "--out", "{d}/o",
                                   "--report", "{d}/o"], ["would replace the table"]),
    ("sweep-scheduler-without-dask", ["sweep", "{s}", "--vary", "seed=1,2", "--out", "{d}/o",
                                      "--scheduler", "tcp://127.0.0.1:1"],
     ["add --executor dask"]),
    ("check-without-a-baseline", ["check", "{s}", "--baseline", "{d}/none.json", "--slo",
                                  "ttft_p99=2s"], ["no such baseline", "--update"]),
    ("check-baseline-of-a-huge-integer", ["check", "{s}", "--baseline", "{d}/big.json"],
     ["not a `fleetsim check` baseline"]),
    ("compare-summary-of-a-huge-integer", ["compare", "{d}/bigrun", "{d}/bigrun"],
     ["not a summary.json that `fleetsim run` wrote"]),
    ("run-set-nested-100-deep", ["run", "{s}", "--set", "pools.main.replicas=" + "[" * 100
                                 + "]" * 100, "--out", "{d}/o"],
     ["nested more than 32 levels deep"]),
    ("calibrate-model-file-not-yaml-data", ["calibrate", "--model", "{d}/m.yaml", "--quick",
                                            "--out", "{d}/o"], ["m.yaml:1", "num_layers"]),
    ("validate-vllm-log-not-a-run", ["validate", "--engine", "vllm", "--from-logs",
                                     "{d}/runs", "--out", "{d}/o"],
     ["not a recorded vLLM run fleetsim can read"]),
    ("check-baseline-number-of-5000-digits", ["check", "{s}", "--baseline", "{d}/b.json"],
     ["number too long"]),
    ("run-replications-with-a-sweep-table", ["run", "{s}", "--replications", "2", "--sweep",
                                             "{d}/b.json", "--out", "{d}/o"],
     ["--sweep", "does not go with --replications"]),
    ("run-sweep-table-of-words", ["run", "{s}", "--sweep", "{d}/sw.csv", "--out", "{d}/o"],
     ["sw.csv:3: ttft_p99_s: not a figure a sweep writes"]),
    ("run-sweep-table-of-a-header-only", ["run", "{s}", "--sweep", "{d}/sw0.csv", "--out",
                                          "{d}/o"], ["sw0.csv is a sweep table of no points"]),
    ("run-sweep-table-twice-a-column", ["run", "{s}", "--sweep", "{d}/sw2.csv", "--out",
                                        "{d}/o"], ["names column 'ttft_p99_s' twice"]),
    ("size-set-an-unknown-gpu", ["size", "{s}", "--slo", "ttft_p99=2s", "--set",
                                 "pools.main.hardware=TPU"],
     ["pools.main.hardware: with --set: unknown hardware 'TPU'", "H100-SXM"]),
    ("size-set-sizing-of-an-impossible-tp", ["size", "{s}", "--slo", "ttft_p99=2s", "--set",
                                             "pools.main.sizing={{tp: [3]}}"],
     ["pools.main.sizing.tp[0]: with --set: tp=3 does not divide"]),
    ("sweep-one-duration-in-three-units", ["sweep", "{s}", "--vary",
                                           "duration=10,10s,10000ms", "--out", "{d}/o"],
     ["--vary duration: '10s' and 10 are the same value"]),
    ("sweep-one-rate-in-two-units", ["sweep", "{s}", "--vary",
                                     "workload.streams.chat.arrival.rate=4/s,240/min",
                                     "--out", "{d}/o"], ["'240/min' and '4/s' are the same"]),
    ("sweep-vary-the-name", ["sweep", "{s}", "--vary", "name=a,b", "--out", "{d}/o"],
     ["--vary name: the name labels the results and changes no result"]),
    ("calibrate-a-model-of-odd-head-size", ["calibrate", "--model", "{d}/odd.yaml", "--quick",
                                            "--out", "{d}/o"],
     ["--model: head_dim 1 is odd", "even head size"]),
    ("validate-vllm-log-of-a-step-of-1e25-tokens",
     ["validate", "--engine", "vllm", "--from-logs", "{d}/huge", "--out", "{d}/o"],
     ["steps[0]: a sequence's token counts are not whole numbers from 0 to 10,000,000"]),
    ("validate-vllm-log-of-a-step-of-1e308-s",
     ["validate", "--engine", "vllm", "--from-logs", "{d}/long", "--out", "{d}/o"],
     ["steps[1]: runs from", "takes at most 60 s"]),
    ("size-max-rate-of-closed-loop-streams",
     ["size", "{d}/closed.yaml", "--slo", "ttft_p99=2s", "--max-rate"],
     ["error: --max-rate scales the streams' rates", "closed-loop"]),
    ("size-attainment-alone", ["size", "{s}", "--slo", "attainment=1", "--max-rate"],
     ["--slo: attainment counts the requests within every latency bound"]),
    ("check-baseline-of-an-unknown-slo-metric", ["check", "{s}", "--baseline",
                                                 "{d}/slokey.json"],
     ["not a `fleetsim check` baseline", "slos: must be an object of SLO metrics"]),
    ("sweep-vary-the-sample-interval", ["sweep", "{s}", "--vary", "sample_interval=1s,2s",
                                        "--out", "{d}/o"],
     ["the time series' period and changes no result"]),
    ("size-slo-of-a-denormal-second", ["size", "{s}", "--slo", "ttft_p99=1e-320s"],
     ["a latency target lies between 1 us and 30 days"]),
    ("lint-allow-path-empty", ["lint", "{s}", "--allow-path", ""], ["--allow-path",
                                                                    "an empty path"]),
    ("run-set-a-field-twice", ["run", "{s}", "--set", "pools.main.replicas=1", "--set",
                               "pools.main.replicas=3", "--out", "{d}/o"],
     ["--set pools.main.replicas: given twice"]),
    ("run-set-the-seed-and-seed-flag", ["run", "{s}", "--set", "seed=5", "--seed", "7",
                                        "--out", "{d}/o"], ["--set seed and --seed both"]),
    ("run-quiet-and-json", ["run", "{s}", "--quiet", "--json", "--out", "{d}/o"],
     ["--quiet prints nothing and --json"]),
    ("size-force-without-out", ["size", "{s}", "--slo", "ttft_p99=2s", "--force"],
     ["--force replaces an output folder"]),
    ("run-workers-without-replications", ["run", "{s}", "--workers", "2", "--out", "{d}/o"],
     ["--workers", "give --replications N"]),
    ("calibrate-model-file-of-other-keys", ["calibrate", "--model", "{d}/k.yaml", "--quick",
                                            "--out", "{d}/o"], ["not a model profile"]),
    ("run-negative-warmup-without-equals", ["run", "{s}", "--warmup", "-1s", "--out", "{d}/o"],
     ["--warmup=VALUE"]),
    ("run-warmup-past-the-duration", ["run", "{s}", "--warmup", "20s", "--duration", "10s",
                                      "--out", "{d}/o"],
     ["warmup: with --warmup: warm-up (20 s) must end before the arrivals do"]),
    ("run-negative-warmup", ["run", "{s}", "--warmup=-1s", "--out", "{d}/o"],
     ["must be at least 0"]),
    ("sweep-vary-and-set-one-field", ["sweep", "{s}", "--vary", "pools.main.replicas=1,2",
                                      "--set", "pools.main.replicas=3", "--out", "{d}/o"],
     ["--vary pools.main.replicas and --set pools.main.replicas both give it"]),
    ("sweep-vary-a-value-twice", ["sweep", "{s}", "--vary", "pools.main.replicas=1,2,1",
                                  "--out", "{d}/o"], ["the value 1 is listed more than once"]),
    ("check-update-with-a-tolerance", ["check", "{s}", "--baseline", "{d}/new.json",
                                       "--update", "--tolerance", "5%"],
     ["--tolerance", "--update writes the baseline without comparing"]),
    ("check-baseline-of-negative-figures", ["check", "{s}", "--baseline", "{d}/neg.json"],
     ["not a `fleetsim check` baseline", "at least 0"]),
    ("compare-summary-holding-nan", ["compare", "{d}/nanrun", "{d}/nanrun"],
     ["not a summary.json that `fleetsim run` wrote"]),
    ("compare-one-run", ["compare", "{d}/negrun"], ["give 2 to 16 runs", "not 1"]),
    ("compare-a-summary-file-not-its-folder",
     ["compare", "{d}/negrun/summary.json", "{d}/nanrun"],
     ["compare takes a result folder", "negrun"]),
    ("compare-summary-of-a-negative-latency", ["compare", "{d}/negrun", "{d}/nanrun"],
     ["negrun/summary.json", "figure ttft_p99_s is -3, below zero"]),
    ("compare-summary-of-an-slo-list", ["compare", "{d}/slorun", "{d}/strrun"],
     ["slorun/summary.json", "its slo is not an object"]),
    ("compare-summary-of-an-slo-fleet-number", ["compare", "{d}/slofleetrun", "{d}/slofleetrun"],
     ["slofleetrun/summary.json", "its slo is not an object"]),
    ("compare-summary-of-a-string-figure", ["compare", "{d}/strrun", "{d}/strrun"],
     ["figure requests_per_s is a str, not a number"]),
    ("run-set-a-block-and-a-field-inside-it",
     ["run", "{s}", "--set", "pools.main.replicas=4", "--set",
      "pools.main={{model: llama-3.1-8b, hardware: H100-SXM}}", "--out", "{d}/o"],
     ["--set pools.main and --set pools.main.replicas: one holds the other"]),
    ("sweep-set-a-block-vary-a-field-inside-it",
     ["sweep", "{s}", "--set", "pools.main.scheduler={{type: continuous}}", "--vary",
      "pools.main.scheduler.max_num_batched_tokens=2048,4096", "--out", "{d}/o"],
     ["--vary pools.main.scheduler.max_num_batched_tokens and --set pools.main.scheduler"]),
    ("sweep-vary-a-block-and-a-field-inside-it",
     ["sweep", "{s}", "--vary", "pools.main.replicas=1,2", "--vary",
      "pools.main={{model: llama-3.1-8b, hardware: H100-SXM}}", "--out", "{d}/o"],
     ["--vary pools.main and --vary pools.main.replicas: one holds the other"]),
    ("run-a-scenario-path-that-is-not-there", ["run", "{d}/nowhere/quickstart.yaml", "--out",
                                               "{d}/o"], ["not found"]),
    ("run-set-a-yaml-alias-bomb", ["run", "{s}", "--set",
                                   "description=[&a [1, 1, 1], [*a, *a], [*a, *a]]",
                                   "--out", "{d}/o"], ["cannot hold YAML aliases"]),
    ("size-a-pool-twice", ["size", "{s}", "--slo", "ttft_p99=2s", "--pool", "main",
                           "--pool", "main"], ["--pool main: given twice"]),
    ("sweep-one-value-in-two-spellings", ["sweep", "{s}", "--vary", "workload.rate_scale=1,1.0",
                                          "--out", "{d}/o"], ["listed more than once"]),
    ("run-set-into-a-block-left-out", ["run", "{s}", "--set", "pools.main.autoscaler.target=2",
                                       "--out", "{d}/o"],
     ["pools.main.autoscaler is not set in the scenario", "type: fixed, target, scheduled"]),
    ("run-set-into-slos-left-out", ["run", "{s}", "--set", "slos.ttft_p99=1s", "--out", "{d}/o"],
     ["slos is not set in the scenario: set the block whole (slos={...})", "ttft_p99"]),
    ("run-set-into-an-empty-block", ["run", "{s}", "--set", "models.m.num_layers=2", "--out",
                                     "{d}/o"], ["no 'm' in models, which holds none",
                                                "(models.m={...})"]),
    ("run-set-into-an-unknown-pool", ["run", "{s}", "--set", "pools.nosuchpool.replicas=2",
                                      "--out", "{d}/o"],
     ["no field 'nosuchpool' at pools; valid: main"]),
    ("sweep-vary-a-value-below-the-range", ["sweep", "{s}", "--vary", "pools.main.replicas=0,1",
                                            "--out", "{d}/o"],
     ["error: pools.main.replicas: with --vary pools.main.replicas=0: Input should be greater"]),
    ("sweep-vary-an-unknown-gpu", ["sweep", "{s}", "--vary", "pools.main.hardware=H100-SXM,TPU",
                                   "--out", "{d}/o"],
     ["error: pools.main.hardware: with --vary pools.main.hardware='TPU': unknown hardware "
      "'TPU'", "H100-SXM"]),
    ("sweep-vary-a-flow-mapping", ["sweep", "{s}", "--vary",
                                   "pools.main.autoscaler={{type: fixed, replicas: 2}},"
                                   "{{type: fixed, replicas: 3}}", "--out", "{d}/o"],
     ["pools.main.autoscaler.replicas: with --vary pools.main.autoscaler={'type': 'fixed', "
      "'replicas': 2}: unknown key 'replicas'"]),
    ("calibrate-engine-without-kernels", ["calibrate", "--model", "tiny-llama", "--engine",
                                          "sglang", "--quick",
                                          "--out", "{d}/o"],
     ["--engine is for profiles built from measured kernels"]),
]


@pytest.mark.parametrize("argv, fragments", [pytest.param(a, f, id=i) for i, a, f in ARGV_CASES])
def test_a_bad_command_line_is_refused_before_any_work(tmp_path, capsys, argv, fragments):
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    (tmp_path / "b.json").write_text('{"robust": ' + "9" * 5000 + "}\n", encoding="utf-8")
    # a baseline and a summary shaped right but holding an integer past any figure
    (tmp_path / "big.json").write_text(json.dumps({str(path): {
        "pools": {"main": {"required_replicas": 10 ** 400}}, "latency_s": {}}}),
        encoding="utf-8")
    (tmp_path / "bigrun").mkdir()
    (tmp_path / "bigrun" / "summary.json").write_text(json.dumps({
        "pools": {"main": {"replicas": 10 ** 400}}, "latency_s": {}, "throughput": {}}),
        encoding="utf-8")
    (tmp_path / "m.yaml").write_text("num_layers: [1, 2]\n", encoding="utf-8")
    (tmp_path / "closed.yaml").write_text(BASE.replace(
        "{type: poisson, rate: 2/s}", "{type: closed, concurrency: 2, requests: 20}"),
        encoding="utf-8")
    (tmp_path / "odd.yaml").write_text(
        "name: odd\nnum_layers: 1\nhidden_size: 7\nnum_heads: 7\nnum_kv_heads: 7\n"
        "head_dim: 1\nffn_size: 1\nvocab_size: 1\n", encoding="utf-8")
    (tmp_path / "k.yaml").write_text("aws_secret_key: 1\n", encoding="utf-8")
    (tmp_path / "slokey.json").write_text(json.dumps({str(path): {
        "pools": {"main": {"required_replicas": 1}}, "latency_s": {},
        "slos": {"aws_secret_key": 1}}}), encoding="utf-8")
    (tmp_path / "neg.json").write_text(json.dumps({str(path): {
        "pools": {"main": {"required_replicas": -5}}, "latency_s": {"ttft_p99": -1}}}),
        encoding="utf-8")
    (tmp_path / "nanrun").mkdir()
    (tmp_path / "nanrun" / "summary.json").write_text(
        '{"pools": {"main": {}}, "latency_s": {}, "throughput": {"requests_per_s": NaN}}',
        encoding="utf-8")
    for name, slo in (("slorun", [1]), ("slofleetrun", {"met": True, "fleet": 5})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({
            "pools": {"main": {}}, "latency_s": {}, "throughput": {}, "slo": slo}),
            encoding="utf-8")
    for name, throughput, latency in (("negrun", {}, {"ttft": {"p99": -3}}),
                                      ("strrun", {"requests_per_s": "aws_secret_key"}, {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({
            "pools": {"main": {}}, "latency_s": latency, "throughput": throughput}),
            encoding="utf-8")
    (tmp_path / "sw0.csv").write_text(
        "pools.main.replicas,arrived,output_tokens_per_s,ttft_p99_s,tpot_p99_s\n",
        encoding="utf-8")
    (tmp_path / "sw2.csv").write_text(
        "pools.main.replicas,arrived,output_tokens_per_s,ttft_p99_s,tpot_p99_s,ttft_p99_s\n"
        "1,40,100.5,0.1,0.01,0.2\n", encoding="utf-8")
    (tmp_path / "sw.csv").write_text(
        "pools.main.replicas,arrived,output_tokens_per_s,ttft_p99_s,tpot_p99_s\n"
        "1,40,100.5,,\n2,40,210,soon,0.02\n", encoding="utf-8")
    import gzip
    recorded = Path(__file__).resolve().parent / "data" / "vllm-recorded" / "vllm-light"
    for name, edit_log in (("huge", lambda log: log["steps"][0]["seqs"][0].update(new=1e25)),
                           ("long", lambda log: log["steps"][1].update(end_s=1e308))):
        folder = tmp_path / name / "vllm-light"
        folder.mkdir(parents=True)
        (folder / "plan.json").write_bytes((recorded / "plan.json").read_bytes())
        log = json.loads(gzip.decompress((recorded / "vllm_log.json.gz").read_bytes()))
        edit_log(log)
        (folder / "vllm_log.json").write_text(json.dumps(log), encoding="utf-8")
    run = tmp_path / "runs" / "w"
    run.mkdir(parents=True)
    (run / "plan.json").write_text('{"engine": {"block_size": 0}}', encoding="utf-8")
    (run / "vllm_log.json").write_text("[1, 2, 3]", encoding="utf-8")
    args = [a.format(s=path, d=tmp_path) for a in argv]
    code = run_main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert "aws_secret_key" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, start", [
    (["sweep", "{s}", "--vary", "seed=1,2", "--vary", "seed=3,4", "--out", "{d}/o.csv"],
     "error: --vary seed: given twice"),
    (["sweep", "{s}", "--vary", "pools.main.replicas=5..1", "--out", "{d}/o.csv"],
     "error: --vary 'pools.main.replicas=5..1': the range is empty"),
    (["size", "{s}", "--slo", "ttft_p99=2s", "--slo", "ttft_p99=1s"],
     "error: --slo ttft_p99: given twice"),
    (["run", "{s}", "--workers", "2", "--out", "{d}/o"], "error: --workers runs replications"),
    (["run", "{s}", "--set", "=5", "--out", "{d}/o"], "error: --set '=5': write PATH=VALUE"),
])
def test_a_flag_is_named_once_in_its_error(tmp_path, capsys, argv, start):
    """A message that opens with its flag is not prefixed with the flag again (it read
    ``--vary: --vary seed: given twice``)."""
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    code = run_main([a.format(s=path, d=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(start), err
    assert not re.search(r"(--[a-z-]+): \1\b", err), err


@pytest.mark.parametrize("text, argv, start", [
    (BASE.replace("duration: 20s\n", "duration: 20s\nwarmup: 15s\n"), ["--duration", "10s"],
     "{s}:4: warmup: with --duration: warm-up (15 s) must end before the arrivals do"),
    (BASE.replace("duration: 20s\n", "duration: 20s\nwarmup: 15s\n"),
     ["--duration", "10s", "--set", "pools.main.replicas=2", "--seed", "3"],
     "{s}:4: warmup: with --duration: warm-up (15 s) must end before the arrivals do"),
    (trace_stream(), ["--warmup", "10s"],
     "warmup: with --warmup: no request arrives after the warm-up (10 s; the last of 3"),
    (trace_stream(), ["--set", "warmup=10s"],
     "warmup: with --set: no request arrives after the warm-up (10 s; the last of 3"),
    (trace_stream(), ["--warmup", "10s", "--replications", "2", "--workers", "2"],
     "warmup: with --warmup: no request arrives after the warm-up (10 s; the last of 3"),
])
def test_an_override_s_error_names_the_flag_that_made_it(tmp_path, capsys, text, argv, start):
    """A --duration shorter than the file's warm-up names --duration at the warm-up's line
    (it blamed --set, or no flag); a warm-up a flag gave that no arrival outlasts names the
    flag, not a line of the scenario (found while the run is prepared)."""
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "t.csv").write_text(TRACE_HEADER + "0,100,10\n1,100,10\n2,100,10\n",
                                    encoding="utf-8")
    code = run_main(["run", str(path), *argv, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: " + start.format(s=path)), err
    assert err.count("--set") == start.count("--set") and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("entry, fragment", [
    ({"pools": {"main": {"required_replicas": -5}}, "latency_s": {}},
     "pools.main.required_replicas: is below 0 (a count of at least 0, or null where none"),
    ({"pools": {"main": {"required_replicas": "aws_secret_key"}}, "latency_s": {}},
     "pools.main.required_replicas: is a string, not a number or null"),
    ({"pools": {"main": 3}, "latency_s": {}}, "pools.main: must be an object with "
                                              "required_replicas"),
    ({"pools": {}, "latency_s": {"ttft_p99": float("nan")}},
     "latency_s.ttft_p99: is not a finite number (seconds, at least 0, or null where no"),
    ({"pools": {}, "latency_s": {"aws_secret_key": 10 ** 400}},
     "latency_s: is larger than any figure a run gives"),
    ({"pools": {"main": {"required_replicas": 1, "slo_values": {"ttft_p99": -1}}},
      "latency_s": {}}, "pools.main.slo_values: must be an object of SLO metrics"),
    ({"pools": {"main": {"required_replicas": 1, "slo_values": [1]}}, "latency_s": {}},
     "pools.main.slo_values: must be an object of SLO metrics"),
    ([1], "must be an object of pools, latency_s and slos"),
    ({"pools": {}, "latency_s": {}, "set": "pools.main.replicas=2"},
     "set: must be a list of the --set PATH=VALUE it was made with"),
])
def test_a_bad_baseline_names_its_entry_and_field(tmp_path, capsys, entry, fragment):
    """Which entry (its number and scenario), which field, and what is wrong with it (it
    said 'entry 1: pools: each pool must be ...'), never the value or a key of no figure."""
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"other.yaml": {"pools": {}, "latency_s": {}},
                                    "s.yaml": entry}), encoding="utf-8")
    code = run_main(["check", str(path), "--baseline", str(baseline), "--slo", "ttft_p99=1s"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {baseline}: --baseline: not a `fleetsim check` baseline: "
                          f"entry 2 (s.yaml): {fragment}"), err
    assert "aws_secret_key" not in err and "None" not in err


# numbers on the command line outside what a run can use: argparse's usage error, exit 2
FLAG_CASES = [
    ("run-a-billion-replications", ["run", "{s}", "--replications", "1000000000"],
     "--replications", "from 1 to 10,000"),
    ("run-ten-thousand-workers", ["run", "{s}", "--replications", "2", "--workers", "10000"],
     "--workers", "from 1 to 256"),
    ("sweep-zero-workers", ["sweep", "{s}", "--vary", "seed=1,2", "--workers", "0"],
     "--workers", "from 1 to 256"),
    ("sweep-negative-workers", ["sweep", "{s}", "--vary", "seed=1,2", "--workers=-4"],
     "--workers", "from 1 to 256"),
    ("check-tolerance-nan", ["check", "{s}", "--baseline", "{d}/b.json", "--tolerance", "nan"],
     "--tolerance", "from 0 to 1000%"),
    ("check-tolerance-negative", ["check", "{s}", "--baseline", "{d}/b.json",
                                  "--tolerance=-5%"], "--tolerance", "from 0 to 1000%"),
    ("check-tolerance-huge", ["check", "{s}", "--baseline", "{d}/b.json", "--tolerance",
                              "1e300%"], "--tolerance", "from 0 to 1000%"),
    ("run-empty-out", ["run", "{s}", "--out", ""], "--out", "an empty path"),
    ("calibrate-a-step-of-one-token", ["calibrate", "--model", "tiny-llama", "--quick",
                                       "--max-tokens", "1"], "--max-tokens", "from 64 to"),
    ("sweep-empty-out", ["sweep", "{s}", "--vary", "seed=1,2", "--out", " "], "--out",
     "an empty path"),
    ("run-empty-sweep", ["run", "{s}", "--sweep", "", "--out", "{d}/o"], "--sweep",
     "an empty path"),
    ("import-model-empty-out", ["import-model", "{s}", "--out", ""], "--out", "an empty path"),
    ("import-model-empty-config", ["import-model", ""], "config", "an empty path"),
    ("check-bare-tolerance-above-one", ["check", "{s}", "--baseline", "{d}/b.json",
                                        "--tolerance", "5"], "--tolerance", "write 5%"),
]


@pytest.mark.parametrize("argv, flag, fragment",
                         [pytest.param(a, f, m, id=i) for i, a, f, m in FLAG_CASES])
def test_a_flag_out_of_range_is_a_usage_error(tmp_path, capsys, monkeypatch, argv, flag,
                                              fragment):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    code = run_main([a.format(s=path, d=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: argument {flag}: ") and fragment in err, err
    assert err.count("\n") == 1 and "--help" in err       # one line, naming the help
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_an_unreachable_dask_scheduler_is_a_located_error(tmp_path, capsys, monkeypatch):
    """Nothing listens on port 1 of this machine: refused at once, never a traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sim.planning.runner.DASK_CONNECT_TIMEOUT_S", 5.0)
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    code = run_main(["sweep", str(path), "--vary", "seed=1,2", "--executor", "dask",
                     "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: --scheduler: cannot reach the Dask scheduler "
                          "'tcp://127.0.0.1:1'"), err
    assert not (tmp_path / "o.csv").exists()


def test_the_catalogue_holds_150_cases():
    assert len(CASES) + len(ARGV_CASES) >= 150
