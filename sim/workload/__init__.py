"""Turn a :class:`~sim.config.workload.WorkloadConfig` into the requests of one run.

The whole run's arrivals are generated up front as sorted columnar numpy
arrays: it is fast, it makes runs reproducible from one SeedSequence, and it
lets different fleet designs be compared on exactly the same requests.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np

from sim.config.workload import (ClosedArrivalConfig, StreamConfig, TraceArrivalConfig,
                                 WorkloadConfig)
from sim.config.inputs import DataFiles, as_data_files
from sim.workload.arrivals import process_arrival_times
from sim.workload.lengths import sample_lengths
from sim.workload.sessions import draw_turns
from sim.workload.trace import WorkloadDataError, replay_trace, resolve_path
from sim.workload.trace_formats import load_trace

__all__ = ["RequestArrivals", "WorkloadDataError", "generate_arrivals", "stream_seed_seqs"]


@dataclass(frozen=True)
class RequestArrivals:
    """All requests of a run, one row per request, sorted by ``arrival_s``.

    Ties keep stream order, then generation order, so the ordering is fully
    determined by the inputs. The requests of closed-loop streams (sent when a
    client's last request ends) have no time until the run gives them one: they
    come last, with ``arrival_s`` infinite, in stream then generation order.
    """

    arrival_s: np.ndarray       # float64, seconds since the start of the run
    prompt_tokens: np.ndarray   # int64, >= 1
    output_tokens: np.ndarray   # int64, >= 1
    stream_index: np.ndarray    # int32, index into stream_names
    stream_names: tuple[str, ...]
    prefix_group: np.ndarray | None = None   # int32 group of the shared prefix, -1 for none
    # multi-turn sessions (None when no stream has them): the conversation a row belongs
    # to (-1 for none), the pause before it, and the row of its conversation's next turn
    session: np.ndarray | None = None        # int64
    think_s: np.ndarray | None = None        # float64
    next_turn: np.ndarray | None = None      # int64, -1 for a conversation's last turn
    turn: np.ndarray | None = None           # int32, 1 for a first turn, -1 for none
    # a traced prompt's named blocks (Mooncake hash_ids), None when no trace names them:
    # per row (copy of the trace, ids) or None
    block_ids: np.ndarray | None = None      # object
    # closed-loop streams without a request count: stream index -> more of its requests
    refills: dict | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def num_timed(self) -> int:
        """Requests whose arrival time is known in advance (they come first)."""
        return int(np.searchsorted(self.arrival_s, np.inf, side="left"))


def stream_seed_seqs(seed_seq: np.random.SeedSequence, n_streams: int
                     ) -> list[np.random.SeedSequence]:
    """Children 0..n-1 of ``seed_seq``, as ``seed_seq.spawn`` would give on a fresh
    sequence, but without advancing its spawn counter.

    Stream i always gets child i, so adding a stream at the end leaves the
    others' draws unchanged, and calling :func:`generate_arrivals` twice with
    the same object gives the same requests. Pass a SeedSequence dedicated to
    the workload (e.g. one child of the run's root), not one that other parts
    of the simulator also spawn from.
    """
    return [np.random.SeedSequence(seed_seq.entropy, spawn_key=(*seed_seq.spawn_key, i),
                                   pool_size=seed_seq.pool_size)
            for i in range(n_streams)]


def _stream_requests(stream: StreamConfig, duration_s: float, rate_scale: float,
                     seed_seq: np.random.SeedSequence, base_dir: DataFiles,
                     max_requests: int | None = None) -> tuple[np.ndarray, ...]:
    """(arrival_s, prompt_tokens, output_tokens, prefix_group, session, think_s,
    block_ids) of one stream, by time (a session's later turns last, untimed).

    Arrival times, prompt lengths and output lengths use separate generators
    so that changing the rate does not reshuffle which lengths are drawn.
    """
    start_s = stream.start
    stop_s = min(duration_s, stream.end if stream.end is not None else np.inf)
    arrival_seq, prompt_seq, output_seq, prefix_seq, session_seq = seed_seq.spawn(5)
    session = think = blocks = None
    if stream.sessions is not None:
        starts_s = process_arrival_times(stream.arrival, np.random.default_rng(arrival_seq),
                                         start_s, stop_s, rate_scale)
        turns = draw_turns(stream.sessions, starts_s, stream.prompt_tokens,
                           stream.output_tokens,
                           stream.prefix.tokens if stream.prefix is not None else 0,
                           session_seq, base_dir)
        arrival_s, prompt, output = turns.arrival_s, turns.prompt_tokens, turns.output_tokens
        session, think = turns.session, turns.think_s
    elif isinstance(stream.arrival, ClosedArrivalConfig):
        # the run times them: sent as clients free up (see sim.core.simulation); without a
        # count, the first wave here and the rest drawn as the run asks (ClosedRefill)
        n = stream.arrival.requests if stream.arrival.requests is not None \
            else stream.arrival.concurrency
        n = n if stop_s > start_s else 0
        arrival_s = np.full(n, np.inf)
        prompt = sample_lengths(stream.prompt_tokens, n, np.random.default_rng(prompt_seq),
                                base_dir)
        output = sample_lengths(stream.output_tokens, n, np.random.default_rng(output_seq),
                                base_dir)
    elif isinstance(stream.arrival, TraceArrivalConfig):
        path = resolve_path(stream.arrival.path, base_dir)
        # the rows up to the run's end only: looped too, a trace that reaches past the
        # end plays once (its period is longer than the run)
        horizon_s = (stop_s - start_s) * rate_scale / stream.arrival.time_scale
        trace = load_trace(path, stream.arrival, horizon_s=horizon_s, max_requests=max_requests)
        arrival_s, prompt, output, row, copy = replay_trace(
            stream.arrival, trace, path, start_s, stop_s, rate_scale)
        if trace.block_ids is not None:
            # each copy of a looped trace stands for other users' prompts: ids of its own
            blocks = np.empty(len(arrival_s), dtype=object)
            for k, (r, c) in enumerate(zip(row.tolist(), copy.tolist())):
                if len(trace.block_ids[r]):
                    blocks[k] = (c, trace.block_ids[r])
    else:
        arrival_s = process_arrival_times(stream.arrival, np.random.default_rng(arrival_seq),
                                          start_s, stop_s, rate_scale)
        n = len(arrival_s)
        prompt = sample_lengths(stream.prompt_tokens, n, np.random.default_rng(prompt_seq),
                                base_dir)
        output = sample_lengths(stream.output_tokens, n, np.random.default_rng(output_seq),
                                base_dir)
    group = np.full(len(arrival_s), -1, dtype=np.int32)
    if stream.prefix is not None:
        # the shared prefix (a system prompt) comes before the sampled user tokens (a
        # session's turns have it already); a conversation keeps its first turn's
        if session is None:
            prompt = prompt + stream.prefix.tokens
            group = np.random.default_rng(prefix_seq).integers(
                0, stream.prefix.groups, len(arrival_s)).astype(np.int32)
        else:
            group = np.random.default_rng(prefix_seq).integers(
                0, stream.prefix.groups, int(session.max(initial=-1)) + 1
            ).astype(np.int32)[session]
    if session is None:
        session = np.full(len(arrival_s), -1, dtype=np.int64)
        think = np.zeros(len(arrival_s))
    if blocks is None:
        blocks = np.full(len(arrival_s), None, dtype=object)
    return arrival_s, prompt, output, group, session, think, blocks


def _child(seq: np.random.SeedSequence, i: int) -> np.random.SeedSequence:
    """Child ``i`` of ``seq``, whatever it has spawned already."""
    return np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, i),
                                  pool_size=seq.pool_size)


class ClosedRefill:
    """More requests for a closed-loop stream without a count, drawn as its clients ask:
    chunk after chunk from generators of their own (so the same run draws the same
    requests, whoever asks first)."""

    CHUNK = 1024

    def __init__(self, stream: StreamConfig, seed_seq: np.random.SeedSequence,
                 base_dir: DataFiles) -> None:
        prompt_seq, output_seq, prefix_seq = seed_seq.spawn(3)
        self.stream = stream
        self.base_dir = base_dir
        self._prompt = np.random.default_rng(prompt_seq)
        self._output = np.random.default_rng(output_seq)
        self._prefix = np.random.default_rng(prefix_seq)

    def draw(self, most: int) -> tuple[list[int], list[int], list[int]]:
        """The next chunk's (of at most ``most`` rows) prompt lengths (shared prefix
        included), output lengths and prefix groups (-1 for none)."""
        n, stream = min(self.CHUNK, most), self.stream
        prompt = sample_lengths(stream.prompt_tokens, n, self._prompt, self.base_dir)
        output = sample_lengths(stream.output_tokens, n, self._output, self.base_dir)
        group = np.full(n, -1, dtype=np.int64)
        if stream.prefix is not None:
            prompt = prompt + stream.prefix.tokens
            group = self._prefix.integers(0, stream.prefix.groups, n)
        return prompt.tolist(), output.tolist(), group.tolist()


def _next_turns(stream_index: np.ndarray, session: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the row of its conversation's next turn (-1 for none) and its turn's
    number (1 for the first, -1 for a row of no conversation): rows of one conversation
    keep their turn order through the stable sort by time (a first turn is timed, the
    later ones come last in generation order)."""
    nxt = np.full(len(session), -1, dtype=np.int64)
    turn = np.full(len(session), -1, dtype=np.int32)
    rows = np.flatnonzero(session >= 0)
    if not len(rows):
        return nxt, turn
    order = rows[np.lexsort((rows, session[rows], stream_index[rows]))]
    same = ((stream_index[order[1:]] == stream_index[order[:-1]])
            & (session[order[1:]] == session[order[:-1]]))
    nxt[order[:-1][same]] = order[1:][same]
    position = np.arange(len(order))
    starts = np.flatnonzero(np.concatenate(([True], ~same)))     # each conversation's first
    first = np.repeat(starts, np.diff(np.append(starts, len(order))))
    turn[order] = position - first + 1
    return nxt, turn


def generate_arrivals(workload: WorkloadConfig, duration_s: float,
                      seed_seq: np.random.SeedSequence,
                      base_dir: DataFiles | pathlib.Path,
                      max_requests: int | None = None) -> RequestArrivals:
    """Generate every stream's requests in [start, min(end, duration_s)) and merge them
    (a closed-loop stream's with no time yet: see :class:`RequestArrivals`).

    Stream i draws from child i of ``seed_seq`` (see :func:`stream_seed_seqs`);
    relative file paths are read from ``base_dir`` (the scenario's folder; a
    :class:`~sim.config.inputs.DataFiles` also bounds where they may lie).
    Same inputs give bit-identical arrays. A trace with more rows before the run's end
    than ``max_requests`` is refused as it is read.
    """
    names = tuple(workload.streams)
    seqs = stream_seed_seqs(seed_seq, len(names))
    parts = [_stream_requests(stream, float(duration_s), workload.rate_scale, seq,
                              as_data_files(base_dir), max_requests)
             for stream, seq in zip(workload.streams.values(), seqs)]
    arrival_s = np.concatenate([p[0] for p in parts]).astype(np.float64, copy=False)
    order = np.argsort(arrival_s, kind="stable")
    stream_index = np.repeat(np.arange(len(names), dtype=np.int32),
                             [len(p[0]) for p in parts])
    stream_index = stream_index[order]
    session = think_s = next_turn = turn = None
    if any(stream.sessions is not None for stream in workload.streams.values()):
        session = np.concatenate([p[4] for p in parts]).astype(np.int64)[order]
        think_s = np.concatenate([p[5] for p in parts]).astype(np.float64)[order]
        next_turn, turn = _next_turns(stream_index, session)
    block_ids = None
    if any(isinstance(stream.arrival, TraceArrivalConfig)
           and stream.arrival.layout.ids_field is not None
           for stream in workload.streams.values()):
        block_ids = np.concatenate([p[6] for p in parts])[order]
    return RequestArrivals(
        arrival_s=arrival_s[order],
        prompt_tokens=np.concatenate([p[1] for p in parts]).astype(np.int64)[order],
        output_tokens=np.concatenate([p[2] for p in parts]).astype(np.int64)[order],
        stream_index=stream_index,
        stream_names=names,
        prefix_group=np.concatenate([p[3] for p in parts]).astype(np.int32)[order],
        session=session, think_s=think_s, next_turn=next_turn, turn=turn, block_ids=block_ids,
        refills={s: ClosedRefill(stream, _child(seq, 5), as_data_files(base_dir))
                 for s, (stream, seq) in enumerate(zip(workload.streams.values(), seqs))
                 if isinstance(stream.arrival, ClosedArrivalConfig)
                 and stream.arrival.requests is None} or None,
    )
