"""Where fleetsim writes, and what it may replace there.

Nothing a user types can make fleetsim delete what it did not write:

* A default output name is :func:`~sim.output.files.output_names.slug` of the scenario's
  name: printable ASCII only, never empty, never ``.``/``..``, never a path,
  never the same for two names.
* Every folder fleetsim writes holds :data:`MARKER`, listing the files written.
  An existing non-empty folder is replaced (with ``--force``) only if it holds
  the marker and nothing the marker does not list; never a symbolic link, the
  current folder, the home folder, ``/``, any folder that holds one of these,
  or a folder that holds one of the command's inputs (the scenario and the
  data files it names). Folders are compared by identity (device and inode),
  so a bind mount or a case-insensitive name does not get past the check.
* A single output file (a sweep table, a sweep page) replaces only a file of
  the same kind.
* The writers are :mod:`sim.output.files.atomic_write`'s: a hidden sibling renamed into place.
* :func:`check_folder` and :func:`check_file` run before the work starts, so
  an output that cannot be written is a located error (exit 2) at once, not
  after the simulation; a write that fails later is one with exit 1.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sim.config.errors import ScenarioError
from sim.output.files.output_names import MARKER, MAX_SLUG_CHARS, has_marker, slug, unlisted

__all__ = ["MARKER", "MAX_SLUG_CHARS", "check_file", "check_folder", "has_marker",
           "os_error", "output_error", "prepare_folder", "probe", "shown", "slug"]

Inputs = Iterable[str | os.PathLike]


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


# --- what may be replaced ----------------------------------------------------------------

def _normal(path: str | os.PathLike) -> Path:
    """``path`` with a real last component (``.``, ``..`` and ``/`` resolved)."""
    path = Path(path)
    return path.resolve() if path.name in ("", ".", "..") else path


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _with_parents(path: str | os.PathLike) -> list[Path]:
    """``path`` (as written, and with links resolved) and each folder above it."""
    found = [Path(os.path.abspath(path))]
    try:
        found.append(Path(path).resolve())
    except (OSError, RuntimeError):
        pass
    return [q for p in found for q in (p, *p.parents)]


def _holds(target: tuple[int, int], inner: str | os.PathLike) -> bool:
    """True if ``inner`` or a folder above it is the file or folder ``target``."""
    return any(_identity(p) == target for p in _with_parents(inner))


def _homes() -> list[Path]:
    found = []
    try:
        found.append(Path.home())
    except (OSError, RuntimeError, KeyError):
        pass
    try:
        import pwd
        found.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    except (ImportError, KeyError, OSError):
        pass
    return found


def _never_replaced(target: Path, inputs: Inputs) -> str | None:
    """Why ``target`` must not be replaced whatever it holds, or None."""
    here = _identity(target)
    if here is None:
        return None
    if here == _identity("/"):
        return "it is the root folder"
    guarded = []
    try:
        guarded.append(("the current folder", Path.cwd()))
    except OSError:
        pass
    guarded += [("your home folder", h) for h in _homes()]
    guarded += [(f"the input {shown(p)}", Path(p)) for p in inputs]
    for what, where in guarded:
        if _holds(here, where):
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
        raise output_error(f"output folder has no {MARKER} marker, so fleetsim did not "
                           f"write it; fleetsim replaces only its own results, even with "
                           f"--force: choose another --out, or empty the folder yourself",
                           out_dir)
    if not force:
        raise output_error("output folder exists; pass --force to replace it", out_dir)
    extra = unlisted(out_dir)
    if extra is not None:
        raise output_error(f"output folder holds {extra}, which fleetsim did not write "
                           f"there; fleetsim replaces only its own results, even with "
                           f"--force: move it out, or choose another --out", out_dir)
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
        if not path.is_file():      # checked before anything opens it: a FIFO would block
            raise output_error("output path exists and is not a regular file (a pipe, a "
                               "device or a socket); fleetsim writes only files", path)
        here = _identity(path)
        if here is not None and any(_holds(here, p) for p in inputs):
            raise output_error("output path is one of the command's inputs", path)
        if not is_kind(path):
            raise output_error(f"output file exists and is not {kind}; fleetsim replaces "
                               f"only a file it wrote: choose another path or remove it", path)
    probe(path.parent)
    return path


def probe(folder: Path, folder_name: str | None = None) -> None:
    """Check that files (and a folder named ``folder_name``) can be made in ``folder``:
    create it and its missing parents, a file in it, then remove all of them again (the
    write makes them when the work is done: a refused command leaves nothing behind)."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if os.path.lexists(existing) and not existing.is_dir():
        raise output_error("this is a file, not a folder: no output can be written "
                           "below it", existing)
    made = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    try:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_error(exc, folder, started=False) from None
        try:
            fd, name = tempfile.mkstemp(prefix=".fleetsim-probe-", dir=folder)
            os.close(fd)
            os.unlink(name)
            if folder_name is not None and not os.path.lexists(folder / folder_name):
                (folder / folder_name).mkdir()      # a name the file system takes
                (folder / folder_name).rmdir()
        except OSError as exc:
            exc.filename = None     # name the output, not the probe
            raise os_error(exc, folder, started=False) from None
    finally:
        for path in made:           # deepest first
            try:
                path.rmdir()
            except OSError:
                break


def prepare_folder(out_dir: str | os.PathLike, *, force: bool, inputs: Inputs = ()) -> Path:
    """:func:`check_folder`, then :func:`probe` its parent: before the work starts."""
    out_dir = check_folder(out_dir, force=force, inputs=inputs)
    # with the name the run will write under (not too long for the file system)
    probe(out_dir.parent, folder_name=f".{out_dir.name}.tmp-{os.getpid()}-probe00")
    return out_dir
