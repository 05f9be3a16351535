"""Run many scenarios: in this process, in local processes, or on Dask.

Each point is sent as its validated scenario (plain JSON) and comes back as
its summary, so a result depends on the scenario alone, never on where or in
which order it ran: the same grid gives the same table on one process, many
processes or a Dask cluster.
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

from sim.config.scenario import Scenario

Progress = Callable[[int, int], None]


Payload = tuple[dict, str | None, tuple[str, ...]]  # scenario, its file, allowed folders


def _payload(scenario: Scenario) -> Payload:
    return scenario.model_dump(mode="json"), scenario._source, scenario._allow_paths


def run_payload(payload: Payload) -> dict:
    """Worker entry point: rebuild the scenario, run it, return its summary."""
    import sim
    data, source, allow_paths = payload
    scenario = Scenario.model_validate(data)
    scenario._source, scenario._allow_paths = source, allow_paths
    return sim.run(scenario).summary


def run_many(scenarios: Sequence[Scenario], *, executor: str = "local", workers: int = 1,
             scheduler: str | None = None, progress: Progress | None = None) -> list[dict]:
    """Summaries of ``scenarios``, in their order."""
    payloads = [_payload(s) for s in scenarios]
    total = len(payloads)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    if executor == "dask":
        return _run_dask(payloads, workers, scheduler, tick)
    if executor != "local":
        raise ValueError(f"unknown executor {executor!r}; choose local or dask")
    if workers <= 1 or total <= 1:
        out = []
        for p in payloads:
            out.append(run_payload(p))
            tick()
        return out
    with ProcessPoolExecutor(max_workers=workers) as pool:
        out = []
        for summary in pool.map(run_payload, payloads):
            out.append(summary)
            tick()
        return out


def _run_dask(payloads, workers: int, scheduler: str | None, tick) -> list[dict]:
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(run_payload, payloads, pure=False)
        for _ in as_completed(futures):
            tick()
        return client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
