"""Where the host's capture socket lives, agreed on by the host and its games without being told, and who
may be at the other end of it: the same user, checked by both sides (SO_PEERCRED)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct

#: Overrides the default path, for the host and every game started with it.
SOCKET_ENV = "PYROFLING_CAPTURE_SOCKET"


def default_socket_path() -> str:
    """``$PYROFLING_CAPTURE_SOCKET``, else ``$XDG_RUNTIME_DIR/pyrofling-capture``, else in a directory of this
    user's own in /tmp (``/tmp/pyrofling-<uid>/capture``, 0700: another user cannot put a socket there first)."""
    explicit = os.environ.get(SOCKET_ENV)
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "pyrofling-capture")
    return f"/tmp/pyrofling-{os.getuid()}/capture"


#: Where PyroFling's Vulkan capture layer looks for its server (the reference's variable and default).
LAYER_SOCKET_ENV = "PYROFLING_SERVER"
LAYER_SOCKET_DEFAULT = "/tmp/pyrofling-socket"


def default_layer_socket() -> str:
    """``$PYROFLING_SERVER``, else ``/tmp/pyrofling-socket``: the socket PyroFling's layer connects to."""
    return os.environ.get(LAYER_SOCKET_ENV) or LAYER_SOCKET_DEFAULT


def private_dir_problem(path: str) -> str | None:
    """Why the directory holding ``path`` cannot be trusted with this user's socket (None: it can): it must be a
    real directory (not a link), owned by this user, that nobody else may write to."""
    directory = os.path.dirname(os.path.abspath(path)) or "/"
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return f"{directory} does not exist"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory (a link?)"
    if st.st_mode & stat.S_ISVTX and st.st_uid == 0:
        return None  # a sticky, root-owned directory (/tmp): nobody may replace another user's entry
    if st.st_uid != os.getuid():
        return f"{directory} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & 0o022:
        return f"{directory} can be written by others (chmod 700 {directory})"
    return None


def prepare_socket_dir(path: str) -> None:
    """The host's side: make the fallback directory (0700) if it is missing, then check it; OSError says why
    it cannot be used."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory.startswith("/tmp/pyrofling-") and not os.path.lexists(directory):
        os.mkdir(directory, 0o700)
    problem = private_dir_problem(path)
    if problem is not None:
        raise OSError(errno.EACCES, f"capture socket {path}: {problem}")


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED: the kernel's word)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
