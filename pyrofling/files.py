"""Files the commands write: statistics that readers can poll, secrets, and checking a path before the work starts."""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

#: Where pairings and the browsers a host remembers are kept, when set (else :func:`default_config_dir`).
CONFIG_DIR_ENV = "PYROFLING_CONFIG_DIR"


def default_config_dir() -> Path:
    given = os.environ.get(CONFIG_DIR_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "pyrofling"


def write_stats(path: Path, stats: dict[str, Any], *, indent: int | None = 2) -> None:
    """Write ``stats`` as JSON beside ``path`` and rename it into place: readers never see half a file.
    ``indent=None``: compact, and several times faster (Python's C encoder; indenting takes the Python one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(stats, indent=indent))
    tmp.replace(path)


class SecretFileError(OSError):
    """A secret's file cannot be written safely; the text says why and what to do."""


def secret_file_problem(path: Path) -> str | None:
    """Why a secret cannot be written to ``path`` safely, or None: it must be a new name or a plain file of this
    user's (not a link: a link planted in a shared folder would take the secret elsewhere), in a folder that
    exists, that others cannot write, or that keeps their hands off this user's files (the sticky bit of /tmp)."""
    parent = path.parent
    try:
        folder = parent.stat()
    except OSError as exc:
        return f"{path}: its folder cannot be used ({exc.strerror or exc})"
    if not stat.S_ISDIR(folder.st_mode):
        return f"{path}: {parent} is not a folder"
    if folder.st_mode & 0o002 and not folder.st_mode & stat.S_ISVTX:
        return f"{path}: anyone can replace files in {parent}: give a file in a folder of your own"
    try:
        here = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(here.st_mode):
        return f"{path} is a link: a secret is not written through a link (remove it, or give another name)"
    if not stat.S_ISREG(here.st_mode):
        return f"{path} is not a plain file"
    if here.st_uid != os.getuid():
        return f"{path} belongs to another user: give a file of your own"
    return None


def write_private(path: Path, data: bytes) -> None:
    """Write a secret (a key, a code, a link with its key) readable by this user only: a new file (0600, made with
    ``O_EXCL | O_NOFOLLOW``) renamed into place, so an existing file's wider mode or a link planted at the name
    is never written through (:class:`SecretFileError`, which says why, when the name is not safe)."""
    problem = secret_file_problem(path)
    if problem is not None:
        raise SecretFileError(problem)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)  # replaces a name, never follows one
    finally:
        tmp.unlink(missing_ok=True)


def private_dir_problem(path: Path) -> str | None:
    """Why the folder ``path`` cannot hold secrets (a link, not a folder, another user's, open to others' writes),
    or None (also when it does not exist)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder (a link?): secrets are kept only in a real folder"
    if st.st_uid != os.getuid():
        return f"{path} belongs to another user: refusing to keep secrets there"
    if st.st_mode & 0o022:
        return f"{path} can be written by others: chmod 700 {path}"
    return None


def private_dir(path: Path) -> Path:
    """A folder for secrets: made 0700 when missing; refused (:class:`SecretFileError`) when it is a link, another
    user's, or open to others' writes."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True)
    problem = private_dir_problem(path)
    if problem is not None:
        raise SecretFileError(problem)
    return path


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
