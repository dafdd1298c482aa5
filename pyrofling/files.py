"""Files the commands write: statistics that readers can poll, and checking a path before the work starts."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_stats(path: Path, stats: dict[str, Any], *, indent: int | None = 2) -> None:
    """Write ``stats`` as JSON beside ``path`` and rename it into place: readers never see half a file.
    ``indent=None``: compact, and several times faster (Python's C encoder; indenting takes the Python one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(stats, indent=indent))
    tmp.replace(path)


def write_private(path: Path, data: bytes) -> None:
    """Write a secret (a key, a code, a link with its key) readable by this user only (0600 from its creation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None.  Creates (and removes) a file beside it to be sure:
    permission bits say nothing to root, and nothing about read-only or special file systems."""
    if path.is_dir():
        return f"{path} is a directory: give a file name"
    parent = path.parent
    if not parent.is_dir():
        return f"{path}: the directory {parent} does not exist (create it first)"
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pyrofling-check-"):
            pass
    except OSError as exc:
        return f"{path}: cannot write in {parent} ({exc.strerror or exc})"
    return None
