"""Where fleetsim writes, and what it may replace there.

Nothing a user types can make fleetsim delete what it did not write:

* A default output name is :func:`slug` of the scenario's name: printable
  ASCII only, never empty, never ``.``/``..``, never a path.
* Every folder fleetsim writes holds :data:`MARKER`. An existing non-empty
  folder is replaced (with ``--force``) only if it holds the marker; never a
  symbolic link, the current folder, the home folder, ``/``, any folder that
  holds one of these, or a folder that holds one of the command's inputs.
* A single output file (a sweep table, a sweep page) replaces only a file of
  the same kind.
* A run writes into a hidden sibling (``.NAME.tmp-PID``) and renames it into
  place. One killed before the rename leaves that sibling behind; the next
  write into the same parent removes it once the process ``PID`` is gone
  (folders only when they hold the marker).
* :func:`check_folder` and :func:`check_file` run before the work starts, so
  an output that cannot be written is a located error (exit 2) at once, not
  after the simulation; a write that fails later is one with exit 1.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sim.errors import ScenarioError

MARKER = ".fleetsim-output"
MAX_SLUG_CHARS = 80
_MARKER_MAX_BYTES = 4096
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)$")

Inputs = Iterable[str | os.PathLike]


def slug(name: str) -> str:
    """A safe folder or file name for ``name``: letters, digits, ``-``, ``_`` and
    ``.`` (every other run of characters becomes one ``-``), no leading dot,
    at most 80 characters; ``scenario`` when nothing is left."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name))
    text = text.lstrip(".-")[:MAX_SLUG_CHARS].rstrip(".-")
    return text or "scenario"


def output_error(message: str, path: str | os.PathLike, *, exit_code: int = 2) -> ScenarioError:
    """A ScenarioError located at ``path``; ``exit_code`` 1 once the work has run."""
    err = ScenarioError(message, file=shown(path))
    err.exit_code = exit_code
    return err


def shown(path: str | os.PathLike) -> str:
    """``path`` as printable text: bytes that are not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def os_error(exc: OSError, path: str | os.PathLike, *, started: bool) -> ScenarioError:
    """An OSError met while writing ``path`` as a located error (exit 1 if ``started``)."""
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or str(exc) or type(exc).__name__
    message = f"cannot write the output: {reason}"
    if started:
        message += " (the work ran, but its results were not saved)"
    return output_error(message, where, exit_code=1 if started else 2)


# --- the marker --------------------------------------------------------------------------

def marker_text(command: str | None = None) -> str:
    """The marker's contents: the same for every run of one version (no clock, no pid)."""
    from sim import __version__
    data = {"written_by": "fleetsim", "version": __version__}
    if command:
        data["command"] = command
    return json.dumps(data) + "\n"


def write_marker(folder: Path, command: str | None = None) -> None:
    with open(folder / MARKER, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(marker_text(command))


def has_marker(folder: Path) -> bool:
    """True if ``folder`` holds a marker file (a small regular file naming fleetsim)."""
    path = Path(folder) / MARKER
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MARKER_MAX_BYTES:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("written_by") == "fleetsim"


# --- what may be replaced ----------------------------------------------------------------

def _normal(path: str | os.PathLike) -> Path:
    """``path`` with a real last component (``.``, ``..`` and ``/`` resolved)."""
    path = Path(path)
    return path.resolve() if path.name in ("", ".", "..") else path


def _holds(outer: Path, inner: Path) -> bool:
    return outer == inner or outer in inner.parents


def _never_replaced(target: Path, inputs: Inputs) -> str | None:
    """Why ``target`` must not be replaced whatever it holds, or None."""
    real = target.parent.resolve() / target.name
    if real.parent == real:
        return "it is the root folder"
    guarded = []
    for what, where in (("the current folder", Path.cwd), ("your home folder", Path.home)):
        try:
            guarded.append((what, where().resolve()))
        except (OSError, RuntimeError):
            pass
    guarded += [(f"the input {p}", Path(p).resolve()) for p in inputs]
    for what, where in guarded:
        if _holds(real, where):
            return f"it is or holds {what}"
    return None


def _is_empty_dir(path: Path) -> bool:
    with os.scandir(path) as entries:
        return next(entries, None) is None


def _check_encoding(path: Path) -> None:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise output_error("the output path is not valid UTF-8, which the file writers "
                           "need: choose another name", path) from None


def check_folder(out_dir: str | os.PathLike, *, force: bool, inputs: Inputs = ()) -> Path:
    """Raise a located error unless ``out_dir`` may be written (replaced only with
    ``force``, and only if fleetsim wrote it); returns the path to write."""
    out_dir = _normal(out_dir)
    _check_encoding(out_dir)
    inputs = list(inputs)
    if os.path.islink(out_dir):
        raise output_error("the output folder is a symbolic link; fleetsim never replaces "
                           "a link (remove it or choose another --out)", out_dir)
    if not os.path.lexists(out_dir):
        return out_dir
    if not out_dir.is_dir():
        raise output_error("output path exists and is not a folder", out_dir)
    why = _never_replaced(out_dir, inputs)
    if why:
        raise output_error(f"will not write the output here: {why}", out_dir)
    try:
        empty = _is_empty_dir(out_dir)
    except OSError as exc:
        raise os_error(exc, out_dir, started=False) from None
    if empty:
        return out_dir
    if not has_marker(out_dir):
        raise output_error(f"output folder holds files fleetsim did not write (no {MARKER}); "
                           f"fleetsim replaces only its own results, even with --force: "
                           f"choose another --out, or empty the folder yourself", out_dir)
    if not force:
        raise output_error(f"output folder {out_dir} exists; pass --force to replace it",
                           out_dir)
    return out_dir


def check_file(path: str | os.PathLike, *, kind: str, is_kind: Callable[[Path], bool],
               inputs: Inputs = ()) -> Path:
    """Raise a located error unless ``path`` may be written: absent, or a file of
    ``kind`` (``is_kind(path)``) that is not an input. Probes that its folder is writable."""
    path = Path(path)
    _check_encoding(path)
    if path.name in ("", ".", ".."):
        raise output_error("output path names a folder, not a file", path)
    if os.path.islink(path):
        raise output_error("output path is a symbolic link; fleetsim never replaces a link",
                           path)
    if os.path.lexists(path):
        if path.is_dir():
            raise output_error("output path is a folder, not a file", path)
        if any(_holds(path.resolve(), Path(p).resolve()) for p in inputs):
            raise output_error("output path is one of the command's inputs", path)
        if not is_kind(path):
            raise output_error(f"output file exists and is not {kind}; fleetsim replaces "
                               f"only a file it wrote: choose another path or remove it", path)
    probe(path.parent)
    return path


def probe(folder: Path) -> None:
    """Create ``folder`` (and its parents) and a file in it, then remove the file."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if os.path.lexists(existing) and not existing.is_dir():
        raise output_error("this is a file, not a folder: no output can be written "
                           "below it", existing)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(exc, folder, started=False) from None
    try:
        fd, name = tempfile.mkstemp(prefix=".fleetsim-probe-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        exc.filename = None     # name the folder, not the probe
        raise os_error(exc, folder, started=False) from None


def prepare_folder(out_dir: str | os.PathLike, *, force: bool, inputs: Inputs = ()) -> Path:
    """:func:`check_folder`, then :func:`probe` its parent: before the work starts."""
    out_dir = check_folder(out_dir, force=force, inputs=inputs)
    probe(out_dir.parent)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    if not os.path.lexists(tmp):    # the name the run will write under (not too long)
        try:
            tmp.mkdir()
            tmp.rmdir()
        except OSError as exc:
            exc.filename = None     # name the output, not the temporary folder
            raise os_error(exc, out_dir, started=False) from None
    return out_dir


# --- leftovers of killed runs ------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):   # another user's process, or not a pid
        return True
    return True


def remove(path: Path) -> None:
    """Remove exactly ``path`` (a folder tree, or a link/file without following it)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def remove_stale(parent: Path, name: str) -> list[Path]:
    """Remove the temporary siblings that killed runs left in ``parent``.

    A folder ``.X.tmp-PID`` or ``.X.old-PID`` goes when it holds the marker and
    process PID is gone (or is this process and X is ``name``: an earlier,
    interrupted write of the same output); a file ``.name.tmp-PID`` (a single
    output file being written) under the same conditions. Links are left alone.
    """
    removed = []
    try:
        with os.scandir(parent) as it:
            entries = list(it)
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match is None or entry.is_symlink():
            continue
        pid = int(match["pid"])
        own = pid == os.getpid()
        if (own and match["name"] != name) or (not own and _alive(pid)):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if not has_marker(path):
                continue
        elif match["name"] != name or ".tmp-" not in entry.name:
            continue
        try:
            remove(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def write_file(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a hidden temporary sibling renamed into place."""
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        remove_stale(path.parent, path.name)
        if isinstance(data, str):
            data = data.encode("utf-8")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise os_error(exc, path, started=True) from None
    finally:
        if os.path.lexists(tmp):
            try:
                remove(tmp)
            except OSError:
                pass
