"""Run many scenarios: in this process, in local processes, or on Dask.

Each point is sent as its validated scenario (plain JSON) and comes back as
its summary, so a result depends on the scenario alone, never on where or in
which order it ran: the same grid gives the same table on one process, many
processes or a Dask cluster.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from typing import Any, Callable, Sequence

from sim.config.scenario import Scenario

Progress = Callable[[int, int], None]


# a scenario, its file, its allowed folders, and the fields command-line flags gave
Payload = tuple[dict, str | None, tuple[str, ...], dict[str, str]]


def scenario_payload(scenario: Scenario) -> Payload:
    """A validated scenario as plain data a worker process can be sent."""
    return (scenario.model_dump(mode="json"), scenario._source, scenario._allow_paths,
            dict(scenario._flags))


def scenario_from_payload(payload: Payload) -> Scenario:
    data, source, allow_paths, flags = payload
    scenario = Scenario.model_validate(data)
    scenario._source, scenario._allow_paths, scenario._flags = source, allow_paths, flags
    return scenario


def run_payload(payload: Payload) -> dict:
    """Worker entry point: rebuild the scenario, run it, return its summary."""
    import sim
    return sim.run(scenario_from_payload(payload)).summary


def run_many(scenarios: Sequence[Scenario], *, executor: str = "local", workers: int = 1,
             scheduler: str | None = None, progress: Progress | None = None) -> list[dict]:
    """Summaries of ``scenarios``, in their order."""
    return map_tasks(run_payload, [scenario_payload(s) for s in scenarios],
                     executor=executor, workers=workers, scheduler=scheduler,
                     progress=progress)


def side_by_side(executor: str, workers: int, tasks: int) -> bool:
    """Whether ``tasks`` run in other processes (``map_tasks`` with these settings), so a
    search reports each as it ends rather than each trial as it starts."""
    return executor != "local" or min(workers, tasks) > 1


def map_tasks(func: Callable[[Any], Any], payloads: Sequence, *, executor: str = "local",
              workers: int = 1, scheduler: str | None = None,
              progress: Progress | None = None) -> list:
    """``func`` (a module-level function, so that workers can import it) of each payload,
    in their order, here, on local processes or on Dask."""
    total = len(payloads)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    if executor == "dask":
        return _run_dask(func, payloads, workers, scheduler, tick)
    if executor != "local":
        raise ValueError(f"unknown executor {executor!r}; choose local or dask")
    workers = min(workers, total, 4 * (os.cpu_count() or 1))
    if workers <= 1:
        out = []
        for p in payloads:
            out.append(func(p))
            tick()
        return out
    return _run_processes(func, payloads, workers, tick)


def _ignore_interrupt() -> None:
    """Workers leave Ctrl-C to the parent, which stops them all at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_processes(func, payloads, workers: int, tick) -> list:
    pool = multiprocessing.Pool(workers, initializer=_ignore_interrupt)
    try:
        out = []
        for summary in pool.imap(func, payloads):
            out.append(summary)
            tick()
    except BaseException:           # Ctrl-C, a worker's error: stop the rest now
        pool.terminate()
        pool.join()
        raise
    pool.close()
    pool.join()
    return out


DASK_CONNECT_TIMEOUT_S = 30.0


class DaskSchedulerError(ValueError):
    """The Dask scheduler named on the command line cannot be reached."""


def _run_dask(func, payloads, workers: int, scheduler: str | None, tick) -> list:
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = scratch = None
    if scheduler:
        try:
            client = Client(scheduler, timeout=DASK_CONNECT_TIMEOUT_S)
        except Exception as exc:    # refused, timed out, a malformed address, a non-Dask peer
            raise DaskSchedulerError(
                f"cannot reach the Dask scheduler {scheduler!r} within "
                f"{DASK_CONNECT_TIMEOUT_S:g} s ({type(exc).__name__}); give its address "
                "as tcp://host:8786") from None
    else:
        # the workers' scratch space is ours and goes with the cluster (Dask's default,
        # /tmp/dask-scratch-space, would stay behind)
        import dask

        scratch = tempfile.TemporaryDirectory(prefix="fleetsim-dask-")
        with dask.config.set({"temporary-directory": scratch.name}):
            cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1,
                                   processes=True, dashboard_address=None,
                                   local_directory=scratch.name)
            client = Client(cluster)
    try:
        futures = client.map(func, payloads, pure=False)
        for _ in as_completed(futures):
            tick()
        return client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        if scratch is not None:
            scratch.cleanup()
