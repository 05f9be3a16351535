"""Names fleetsim gives its outputs, and the marker that says a folder is its own.

* :func:`slug` turns a scenario's name into one safe file name. Distinct names
  never share one: a name that had to change gets a short hash of itself.
* :data:`MARKER` is a small JSON file in every folder fleetsim writes. It
  lists the files written there (relative paths), so that ``--force`` can
  refuse a folder that holds anything else.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import unicodedata
from pathlib import Path

MARKER = ".fleetsim-output"
MAX_SLUG_CHARS = 80
_MARKER_MAX_BYTES = 1 << 20
_HASH_CHARS = 8


def slug(name: str) -> str:
    """A safe folder or file name for ``name``: letters, digits, ``-``, ``_`` and
    ``.`` (accents dropped, every other run of characters one ``-``), no leading
    dot, at most 80 characters. A name that is not already such a name gets
    ``-`` and the first 8 hex digits of its SHA-256, so two names never share a
    slug; one with nothing left is ``scenario-<hash>``."""
    name = str(name)
    plain = "".join(c for c in unicodedata.normalize("NFKD", name)
                    if not unicodedata.combining(c))
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", plain)
    text = text.lstrip(".-")[:MAX_SLUG_CHARS].rstrip(".-")
    if text and text == name:
        return text
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    base = text[:MAX_SLUG_CHARS - _HASH_CHARS - 1].rstrip(".-") or "scenario"
    return f"{base}-{digest}"


def marker_text(command: str | None = None, files: list[str] | None = None,
                stage: bool = False) -> str:
    """The marker's contents: the same for every run of one version (no clock, no
    pid); ``files`` are the relative paths written, sorted; ``stage`` marks a folder
    still being written (what a killed run leaves, and the only kind a later run
    removes unasked)."""
    from sim.version import __version__
    data: dict = {"written_by": "fleetsim", "version": __version__}
    if command:
        data["command"] = command
    if files is not None:
        data["files"] = sorted(files)
    if stage:
        data["stage"] = True
    return json.dumps(data) + "\n"


def write_marker(folder: Path, command: str | None = None,
                 files: list[str] | None = None, stage: bool = False) -> None:
    with open(folder / MARKER, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(marker_text(command, files, stage))


def is_stage(folder: Path) -> bool:
    """True if ``folder``'s marker says it is a folder still being written."""
    marker = read_marker(folder)
    return marker is not None and marker.get("stage") is True


def read_marker(folder: Path) -> dict | None:
    """The marker in ``folder`` (a small regular JSON file naming fleetsim), or None."""
    path = Path(folder) / MARKER
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MARKER_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "fleetsim":
        return None
    return data


def has_marker(folder: Path) -> bool:
    """True if ``folder`` holds a marker file (a small regular file naming fleetsim)."""
    return read_marker(folder) is not None


def listed_files(folder: Path) -> list[str]:
    """Every file and link under ``folder`` (links not followed) as sorted relative
    POSIX paths, the marker left out; an empty folder is listed as ``path/``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d not in links]
        for name in filenames + links:
            found.append((rel / name).as_posix())
        if not filenames and not dirnames and not links and rel != Path("."):
            found.append(rel.as_posix() + "/")
    return sorted(f for f in found if f != MARKER)


UNLISTED_ALL = "files its marker does not list (the marker names no list of files)"


def unlisted(folder: Path) -> str | None:
    """The first path under ``folder`` that its marker does not list, or None. A marker
    without a list of file names (damaged, or not fleetsim's) vouches for nothing:
    :data:`UNLISTED_ALL`."""
    data = read_marker(folder)
    files = data.get("files") if data else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return UNLISTED_ALL
    known = set(files)
    for rel in listed_files(folder):
        if rel not in known:
            return rel
    return None
