"""What the checks that bound a run's work cost inside a run: the request count and
the work estimate (closed loops' paces, storms of refusals) before the run, and the
numbers-written-as-text check while the scenario is read. Times each call in one
process (wall clock: run it on a quiet machine, twice) on the quick start and 300 s
of bench-fleet, and prints their share of the run.

    python tests/bench/checks_cost.py
"""
import time
import functools
import sim
import sim.core.simulation as S
import sim.config.common as C
spent = {}
def timed(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[name] = spent.get(name, 0) + time.perf_counter() - t
    setattr(mod, name, w)
for n in ("check_work", "closed_loop_paces", "check_request_count"):
    timed(S, n)
for n in ("_reads_as_number", "_plain_number"):
    timed(C, n)
for path, dur in (("scenarios/quickstart.yaml", None), ("scenarios/bench-fleet.yaml", 300)):
    spent.clear()
    t = time.perf_counter()
    scn = sim.load_scenario(path)
    if dur:
        scn = sim.with_overrides(scn, duration=dur)
    res = sim.run(scn)
    total = time.perf_counter() - t
    print(path, f"run {total:.2f} s, requests {len(res.requests):,}; #48 checks:",
          {k: f"{1e3*v:.2f} ms" for k, v in spent.items()}, f"share {sum(spent.values())/total:.2e}")
