"""A recorded engine run: everything ``fleetsim validate`` measured for one workload.

``fleetsim validate`` serves each workload on a real engine, passes over a
calibration grid between replays, fits the engine's step terms on the grid and
compares the engine's requests with fleetsim's prediction. Only the serving
and the grid need the engine and depend on the machine's speed; the fit and
the comparison are arithmetic on what was recorded. The log keeps all of it
(every calibration step, every replay's requests and steps, the validation
scenario and the calibrated profile the terms were fitted against), so that

    fleetsim validate --from-logs results/validate

redoes the fit and the comparison with the simulator as it is now, without the
engine, and gives the same figures whatever the machine's speed. The test
suite checks the fit and the comparison this way on logs shipped under
``tests/data/``.

The file is gzip-compressed JSON; floats are written exactly (shortest
round-trip form), so a log read back gives the very same fit.
"""
from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.engines.records import ContinuousLimits, EngineRecord, EngineStep
from sim.config.inputs import InputFileError, open_regular

FORMAT = "fleetsim-engine-log"
VERSION = 1
FILE_NAME = "engine_log.json.gz"
KINDS = ("continuous", "single")
# a log is a few MB at most; refuse to inflate anything far larger
MAX_BYTES = 256 * 2 ** 20

Steps = list[EngineStep]
Replay = tuple[list[EngineRecord], Steps]


class EngineLogError(ValueError):
    """A file that is not a readable engine log (named, with the field at fault)."""


@dataclass
class EngineLog:
    workload: str                    # the validation scenario's name
    kind: str                        # "continuous" or "single"
    engine: str                      # the engine's name
    limits: ContinuousLimits | None  # the continuous engine's limits
    scenario: dict                   # the validation scenario as written
    profile: dict                    # the calibrated profile the engine terms fit against
    calibration: list[tuple[int, EngineStep]]    # (calibration run, step)
    replays: list[Replay]
    meta: dict = field(default_factory=dict)     # host, versions, engine wall time

    # -- writing ---------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION, "workload": self.workload,
            "kind": self.kind, "engine": self.engine,
            "limits": None if self.limits is None else {
                "max_batch_tokens": self.limits.max_batch_tokens,
                "max_requests_per_batch": self.limits.max_requests_per_batch,
                "page_size": self.limits.page_size, "num_blocks": self.limits.num_blocks},
            "meta": self.meta, "scenario": self.scenario, "profile": self.profile,
            "calibration": [[g, *_step_row(s)] for g, s in self.calibration],
            "replays": [{"requests": [_record_row(r) for r in records],
                         "steps": [_step_row(s) for s in steps]}
                        for records, steps in self.replays],
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        data = json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)
        # no name, mtime 0: the same log gives the same bytes
        with open(path, "wb") as raw, \
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as fh:
            fh.write(data.encode("utf-8"))
        return path

    # -- reading ---------------------------------------------------------------------------
    @staticmethod
    def read(path: str | Path) -> "EngineLog":
        path = Path(path)
        try:
            # a regular file only (a FIFO or a device is refused at once, never read)
            with open_regular(path, max_bytes=MAX_BYTES) as raw, \
                    gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                text = fh.read(MAX_BYTES + 1)
        except InputFileError as exc:
            raise EngineLogError(f"{path}: cannot read ({exc.message})") from None
        except (OSError, EOFError, zlib.error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
                "not a gzip-compressed engine log"
            raise EngineLogError(f"{path}: cannot read ({reason})") from None
        if len(text) > MAX_BYTES:
            raise EngineLogError(f"{path}: larger than {MAX_BYTES // 2 ** 20} MiB inflated; "
                                 f"not an engine log")
        try:
            data = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise EngineLogError(f"{path}: not JSON; not an engine log") from None
        return EngineLog.from_json(data, str(path))

    @staticmethod
    def from_json(data, where: str) -> "EngineLog":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise EngineLogError(f"{where}: not an engine log (no 'format: {FORMAT}')")
        if data.get("version") != VERSION:
            raise EngineLogError(f"{where}: version: this fleetsim reads version {VERSION}, "
                                 f"the log is version {data.get('version')!r}")
        kind = _field(data, "kind", str, where)
        if kind not in KINDS:
            raise EngineLogError(f"{where}: kind: expected one of {', '.join(KINDS)}, "
                                 f"got {kind!r}")
        limits = data.get("limits")
        if kind == "continuous":
            if not isinstance(limits, dict):
                raise EngineLogError(f"{where}: limits: a continuous engine's log needs them")
            try:
                limits = ContinuousLimits(**{k: _int(limits.get(k), f"limits.{k}", where)
                                             for k in ("max_batch_tokens",
                                                       "max_requests_per_batch",
                                                       "page_size", "num_blocks")})
            except TypeError:
                raise EngineLogError(f"{where}: limits: unexpected fields") from None
        else:
            limits = None
        calibration = []
        for i, row in enumerate(_field(data, "calibration", list, where)):
            at = f"calibration[{i}]"
            if not isinstance(row, list) or not row:
                raise EngineLogError(f"{where}: {at}: expected [run, start_s, end_s, "
                                     f"idle_before_s, seqs]")
            calibration.append((_int(row[0], at, where), _step(row[1:], at, where)))
        replays = []
        for i, rep in enumerate(_field(data, "replays", list, where)):
            at = f"replays[{i}]"
            if not isinstance(rep, dict):
                raise EngineLogError(f"{where}: {at}: expected {{requests, steps}}")
            records = [_record(r, f"{at}.requests[{j}]", where)
                       for j, r in enumerate(_field(rep, "requests", list, where, at))]
            if not records:
                raise EngineLogError(f"{where}: {at}.requests: empty")
            steps = [_step(s, f"{at}.steps[{j}]", where)
                     for j, s in enumerate(_field(rep, "steps", list, where, at))]
            replays.append((records, steps))
        if not replays:
            raise EngineLogError(f"{where}: replays: the log holds no replay of the workload")
        sizes = {len(r) for r, _ in replays}
        if len(sizes) != 1:
            raise EngineLogError(f"{where}: replays: every replay serves the same requests, "
                                 f"got {sorted(sizes)} requests")
        return EngineLog(workload=_field(data, "workload", str, where), kind=kind,
                         engine=_field(data, "engine", str, where), limits=limits,
                         scenario=_field(data, "scenario", dict, where),
                         profile=_field(data, "profile", dict, where),
                         calibration=calibration, replays=replays,
                         meta=data.get("meta") if isinstance(data.get("meta"), dict) else {})


def find_logs(paths: list[str | Path]) -> list[Path]:
    """Engine logs named directly, or found one level down in validation output folders
    (``OUT/<workload>/engine_log.json.gz``), in order, without duplicates."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            inside = sorted(p.glob(f"*/{FILE_NAME}")) or sorted(p.glob(FILE_NAME))
            if not inside:
                raise EngineLogError(f"{p}: no {FILE_NAME} in it or in its folders (a "
                                     f"folder written by fleetsim validate has one per "
                                     f"workload)")
            found += inside
        elif p.is_file():
            found.append(p)
        else:
            raise EngineLogError(f"{p}: no such file or folder")
    out, seen = [], set()
    for p in found:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            out.append(p)
    return out


# -- rows ----------------------------------------------------------------------------------
def _num(x: float) -> float | None:
    return None if math.isinf(x) else x


def _step_row(s: EngineStep) -> list:
    return [float(s.start_s), float(s.end_s), _num(float(s.idle_before_s)), [[int(q), int(c), int(p)] for q, c, p in s.seqs]]


def _record_row(r: EngineRecord) -> list:
    return [float(r.arrival_s), float(r.first_token_s), float(r.finish_s), int(r.prompt_tokens),
            int(r.output_tokens)]


def _field(data: dict, key: str, typ: type, where: str, at: str = ""):
    value = data.get(key)
    if not isinstance(value, typ) or isinstance(value, bool):
        name = f"{at}.{key}" if at else key
        raise EngineLogError(f"{where}: {name}: expected a {typ.__name__}, got "
                             f"{type(value).__name__}")
    return value


# no engine's step holds more tokens, takes longer, or happens past a run's length
MAX_TOKENS = 10_000_000
MAX_STEP_S = 60.0
MAX_RUN_S = 10 * 365 * 86400.0


def _int(value, at: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKENS:
        raise EngineLogError(f"{where}: {at}: expected a whole number from 0 to "
                             f"{MAX_TOKENS:,}, got {value!r}"[:300])
    return value


def _float(value, at: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (math.isfinite(value) and 0 <= value <= MAX_RUN_S):
        raise EngineLogError(f"{where}: {at}: expected a time from 0 to {MAX_RUN_S:g} s, "
                             f"got {value!r}"[:300])
    return float(value)


def _step(row, at: str, where: str) -> EngineStep:
    if not isinstance(row, list) or len(row) != 4 or not isinstance(row[3], list):
        raise EngineLogError(f"{where}: {at}: expected [start_s, end_s, idle_before_s, "
                             f"[[new tokens, context, is prefill], ...]]")
    start, end = _float(row[0], at, where), _float(row[1], at, where)
    idle = math.inf if row[2] is None else _float(row[2], at, where)
    if end < start or end - start > MAX_STEP_S:
        raise EngineLogError(f"{where}: {at}: the step runs from {start} s to {end} s; a "
                             f"step ends after it starts, within {MAX_STEP_S:g} s")
    seqs = []
    for seq in row[3]:
        if not isinstance(seq, list) or len(seq) != 3 or seq[2] not in (0, 1):
            raise EngineLogError(f"{where}: {at}: a sequence is [new tokens, context, "
                                 f"is prefill 0/1], got {seq!r}"[:300])
        seqs.append((_int(seq[0], at, where), _int(seq[1], at, where), bool(seq[2])))
    return EngineStep(start, end, tuple(seqs), idle)


def _record(row, at: str, where: str) -> EngineRecord:
    if not isinstance(row, list) or len(row) != 5:
        raise EngineLogError(f"{where}: {at}: expected [arrival_s, first_token_s, finish_s, "
                             f"prompt_tokens, output_tokens]")
    arrival, first, finish = (_float(v, at, where) for v in row[:3])
    if not arrival <= first <= finish:
        raise EngineLogError(f"{where}: {at}: expected arrival <= first token <= finish, "
                             f"got {arrival}, {first}, {finish}")
    prompt, output = _int(row[3], at, where), _int(row[4], at, where)
    if prompt < 1 or output < 1:
        raise EngineLogError(f"{where}: {at}: prompt and output need a token each")
    return EngineRecord(arrival, first, finish, prompt, output)
