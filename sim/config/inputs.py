"""Reading the files a user names: where they may live and what they may be.

A scenario may come from someone else (a pull request checked in CI), so
nothing it names may make fleetsim read, or print, a file the user did not
mean to give it:

* The data files a scenario names (a trace, a column of lengths, a
  calibrated profile) must lie inside the scenario's folder or fleetsim's
  shipped data, after symbolic links are followed, unless the user allows
  another folder (``--allow-path DIR``; ``allow_paths=`` in the Python API).
  A scenario built in Python (not read from a file) may name any file.
* Every input, the scenario itself included, must be a regular file no
  larger than a bound: a folder, a FIFO or a device is refused before it is
  read, and a FIFO is opened without waiting for a writer.
* Errors from reading name the file, the line and the field they expected,
  never the file's content.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sim.config.paths import data_dir

MAX_DATA_BYTES = 2 * 2**30      # a trace or a column of lengths
MAX_DOC_BYTES = 64 * 2**20      # a scenario, a profile, a baseline, a summary
ALLOW_FLAG = "--allow-path"


class InputFileError(ValueError):
    """A file that is missing, not a regular file, too large, or where it may not be read."""

    def __init__(self, path: str | os.PathLike, message: str) -> None:
        self.path = Path(path)
        self.message = message
        super().__init__(f"{shown(path)}: {message}")


def shown(path: str | os.PathLike) -> str:
    """``path`` as printable text: bytes that are not UTF-8 as ``\\xNN``, control
    characters escaped."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def open_regular(path: str | os.PathLike, *, max_bytes: int = MAX_DATA_BYTES) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file of at most
    ``max_bytes``; InputFileError otherwise.

    The file is opened without blocking (a FIFO with no writer opens at once)
    and checked on the open descriptor, so what is checked is what is read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputFileError(path, "not found") from None
    except IsADirectoryError:
        raise InputFileError(path, "is a folder, not a file") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or type(exc).__name__}") \
            from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputFileError(path, "is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(path, "is not a regular file (a pipe, a device or a "
                                       "socket); give a file")
        if info.st_size > max_bytes:
            raise InputFileError(path, f"is {_size_text(info.st_size)}; at most "
                                       f"{_size_text(max_bytes)} is read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, *, max_bytes: int = MAX_DOC_BYTES) -> bytes:
    """The content of the regular file ``path`` (see :func:`open_regular`)."""
    try:
        with open_regular(path, max_bytes=max_bytes) as fh:
            data = fh.read(max_bytes + 1)
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or type(exc).__name__}") \
            from None
    if len(data) > max_bytes:
        raise InputFileError(path, f"grew past {_size_text(max_bytes)} while read")
    return data


def check_regular(path: str | os.PathLike) -> None:
    """InputFileError unless ``path`` is an existing regular file (nothing is opened)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(path, "not found") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or type(exc).__name__}") \
            from None
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError(path, "is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError(path, "is not a regular file (a pipe, a device or a socket); "
                                   "give a file")


def shipped_roots() -> tuple[Path, ...]:
    """The folders of fleetsim's own data (profiles and scenarios)."""
    return tuple(data_dir(name).resolve() for name in ("profiles", "scenarios"))


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or lies below it (both resolved)."""
    return path == root or root in path.parents


@dataclass(frozen=True)
class DataFiles:
    """Where a scenario's data files are looked up and where they may live.

    ``folder``: relative paths are relative to it (the scenario's folder).
    ``roots``: resolved folders a data file must lie in, or None for anywhere.
    """

    folder: Path
    roots: tuple[Path, ...] | None = None

    @classmethod
    def for_source(cls, source: str | os.PathLike | None,
                   allow_paths: Iterable[str | os.PathLike] = ()) -> DataFiles:
        """Files of a scenario read from ``source`` (None: built in Python, no bounds)."""
        if source is None:
            return cls(Path.cwd(), None)
        folder = Path(source).parent
        roots = (folder.resolve(), *shipped_roots(),
                 *(Path(p).expanduser().resolve() for p in allow_paths))
        return cls(folder, roots)

    def locate(self, text: str | os.PathLike) -> Path:
        """``text`` as a path: ``~`` expanded, relative to :attr:`folder`."""
        p = Path(text).expanduser()
        return p if p.is_absolute() else self.folder / p

    def allows(self, path: Path) -> bool:
        if self.roots is None:
            return True
        try:
            real = path.resolve()
        except (OSError, RuntimeError):     # a loop of links
            return False
        return any(inside(real, root) for root in self.roots)

    def check(self, path: Path) -> Path:
        """``path`` if it may be read; InputFileError naming where it may live otherwise."""
        try:
            path.resolve(strict=True)
        except RuntimeError:
            raise InputFileError(path, "is a loop of symbolic links") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputFileError(path, "is a loop of symbolic links") from None
        if self.allows(path):
            return path
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            real = path
        link = "" if real == path.absolute() else f" (it leads to {shown(real)})"
        raise InputFileError(
            path, f"lies outside the scenario's folder ({shown(self.folder)}) and fleetsim's "
                  f"shipped data{link}; move it there, or allow its folder with "
                  f"{ALLOW_FLAG} DIR")

    def path(self, text: str | os.PathLike) -> Path:
        """:meth:`locate` then :meth:`check`."""
        return self.check(self.locate(text))


def as_data_files(base: DataFiles | str | os.PathLike | None) -> DataFiles:
    """A :class:`DataFiles`; a plain folder (or None, the current one) sets no bounds."""
    if isinstance(base, DataFiles):
        return base
    return DataFiles(Path(base) if base is not None else Path.cwd(), None)


def scenario_files(scenario) -> DataFiles:
    """The :class:`DataFiles` of a scenario, from where it was read and what was allowed."""
    return DataFiles.for_source(getattr(scenario, "_source", None),
                                getattr(scenario, "_allow_paths", ()))
