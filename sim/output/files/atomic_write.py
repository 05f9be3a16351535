"""Writers that make an output appear complete or not at all.

* :func:`write_file` writes a file in a fresh hidden folder beside it
  (``tempfile.mkdtemp``: created exclusively, never through a link; it holds
  the marker) and renames it into place.
* :func:`write_folder` builds a folder as a fresh hidden sibling
  ``.NAME.tmp-PID-RANDOM`` and renames it into place; an earlier folder it replaces
  is moved aside to a fresh ``.NAME.old-PID-RANDOM`` and removed only once it is
  known to be the very folder that was checked, still holding the marker. Nothing
  already there is ever removed for carrying one of these names.
* :func:`remove_stale` removes what a killed run left behind.
"""
from __future__ import annotations

import os
import stat
import re
import shutil
import tempfile
from pathlib import Path

from sim.config.errors import ScenarioError
from sim.output.files.output_names import (has_marker, is_stage, listed_files, unlisted,
                                     write_marker)
from sim.output.files.output_paths import check_folder, os_error, output_error

_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)"
                        r"(?:-(?P<rand>[A-Za-z0-9_]{6,}))?$")


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


# What a killed run may have left in its temporary folder before its marker listed the
# files (the marker is written first): the outputs of fleetsim's commands, by name
_OUTPUT_NAMES = {"data", "summary.json", "requests.parquet", "requests.csv", "timeseries.csv",
                 "steps.parquet", "steps.csv", "scenario.yaml", "report.html", "plots",
                 "size.csv", "size.json", "max-rate.json", "replications.json",
                 "replications.csv"}


def _only_ours(folder: Path) -> bool:
    """True if ``folder`` holds only what its marker lists, or (a marker with no list
    yet) only names fleetsim's commands write: a user's file in it is never removed."""
    if unlisted(folder) is None:
        return True
    try:
        held = listed_files(folder)
    except OSError:
        return False
    return all(p.split("/", 1)[0] in _OUTPUT_NAMES
               and (not p.startswith("plots/") or p.endswith(".png")) for p in held)


def remove_stale(parent: Path, name: str) -> list[Path]:
    """Remove the temporary siblings that killed runs left in ``parent``.

    A folder named ``.X.tmp-PID[-RANDOM]`` goes when its marker says it is a stage (a
    folder still being written: what a killed run leaves), it holds only what the
    marker vouches for, and process PID is gone (or is this process and X is ``name``:
    an earlier, interrupted write of the same output). Anything else is left alone,
    whatever its name: a finished result folder named like a stage (``--out
    .x.tmp-9``), a user's folder, a file, a link.
    """
    removed = []
    try:
        with os.scandir(parent) as it:
            entries = list(it)
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match["pid"])
        own = pid == os.getpid()
        if (own and match["name"] != name) or (not own and _alive(pid)):
            continue
        path = Path(entry.path)
        if not is_stage(path) or not _only_ours(path):
            continue
        try:
            remove(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def write_file(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a fresh hidden sibling folder (holding the
    marker, so that a killed run's leftover is known as fleetsim's), renamed into place."""
    path = Path(path)
    stage = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(path.parent, path.name)
        if isinstance(data, str):
            data = data.encode("utf-8")
        stage = Path(tempfile.mkdtemp(dir=path.parent,
                                      prefix=f".{path.name}.tmp-{os.getpid()}-"))
        write_marker(stage, "write " + path.name, stage=True)
        tmp = stage / "data"
        with open(tmp, "xb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        raise os_error(exc, path, started=True) from None
    finally:
        if stage is not None:
            _discard(stage)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def write_folder(write, out_dir: Path, *, force: bool = False, inputs=(),
                 command: str | None = None) -> list[Path]:
    """Build a folder with ``write(tmp_folder) -> [paths]`` and rename it to ``out_dir``.

    The folder appears complete or not at all, holding the marker (with the
    list of files written) that lets a later ``force`` replace it; the rules
    for an existing ``out_dir`` are :func:`sim.output.files.output_paths.check_folder`'s.
    Anything that stops the write once the work has run (an OSError, an
    ``out_dir`` that appeared meanwhile) is a located :class:`ScenarioError`
    with exit code 1.
    """
    inputs = list(inputs)
    out_dir = check_folder(out_dir, force=force, inputs=inputs)
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale(parent, out_dir.name)
        # fresh names, never a folder already there (a user's, named like ours, stays)
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out_dir.name}.tmp-{os.getpid()}-"))
    except OSError as exc:
        raise os_error(exc, out_dir, started=True) from None
    old = None
    try:
        # first, so that a killed run's leftover is known as ours (and as a stage: a
        # finished folder, whatever its name, is never taken for a leftover)
        write_marker(tmp, command, stage=True)
        written = write(tmp)
        write_marker(tmp, command, listed_files(tmp))
        try:
            check_folder(out_dir, force=force, inputs=inputs)  # it may have appeared meanwhile
        except ScenarioError as exc:
            raise output_error(f"{exc.message} (the work ran, but its results were not "
                               f"saved)", out_dir, exit_code=1) from None
        checked = _identity(out_dir)
        if checked is not None:
            was_empty = not os.listdir(out_dir)
            # out_dir is a folder here: empty, or ours and force; it replaces an empty
            # folder of a fresh name
            old = Path(tempfile.mkdtemp(dir=parent,
                                        prefix=f".{out_dir.name}.old-{os.getpid()}-"))
            os.replace(out_dir, old)
            if _identity(old) != checked or not (
                    (was_empty and not os.listdir(old))
                    or (has_marker(old) and unlisted(old) is None)):
                os.replace(old, out_dir)
                raise output_error("output folder changed while the results were being "
                                   "saved; it was left as it is (the work ran, but its "
                                   "results were not saved)", out_dir, exit_code=1)
        _set_mode(tmp, None if old is None else os.stat(old))
        try:
            os.replace(tmp, out_dir)
        except BaseException:
            if old is not None and os.path.lexists(old):
                os.replace(old, out_dir)
            raise
    except OSError as exc:
        _discard(tmp)
        raise os_error(exc, out_dir, started=True) from None
    except BaseException:
        _discard(tmp)
        raise
    if old is not None and os.path.lexists(old):
        _discard(old)
    return [out_dir / p.relative_to(tmp) for p in written]


def _set_mode(folder: Path, was: os.stat_result | None) -> None:
    """Give the finished folder the mode a folder made here would have (the umask's, not
    the private temporary one's); in place of an existing folder, that folder's mode and
    group, and with its set-group-ID bit its group for every file in it (as files made
    in it would have had)."""
    if was is None:
        os.chmod(folder, 0o777 & ~_umask())
        return
    os.chmod(folder, stat.S_IMODE(was.st_mode))
    if was.st_gid == os.stat(folder).st_gid:
        return
    paths = [folder]
    if was.st_mode & stat.S_ISGID:
        paths += sorted(folder.rglob("*"))
    for path in paths:
        try:                        # only a group the user belongs to may be given
            os.chown(path, -1, was.st_gid, follow_symlinks=False)
        except OSError:
            break


def _discard(path: Path) -> None:
    try:
        if os.path.lexists(path):
            remove(path)
    except OSError:
        pass   # a later run removes it (remove_stale)
