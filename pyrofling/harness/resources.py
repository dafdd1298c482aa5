"""What this process holds (threads, file descriptors and sockets, child processes), to show a run left none.

Linux: descriptors and children are read from ``/proc``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Held:
    threads: frozenset[tuple[int | None, str]]  # (ident, name)
    fds: tuple[tuple[int, str], ...]  # (descriptor, what it points at: a path, socket:[inode], pipe:[inode])
    children: frozenset[tuple[int, str]]  # (pid, its command name), zombies included

    @property
    def sockets(self) -> int:
        return sum(1 for _, target in self.fds if target.startswith("socket:"))


def _fds() -> tuple[tuple[int, str], ...]:
    out = []
    for entry in Path("/proc/self/fd").iterdir():
        try:
            out.append((int(entry.name), os.readlink(entry)))
        except OSError:  # the descriptor listdir itself used, closed meanwhile
            continue
    return tuple(sorted(out))


def _children() -> frozenset[tuple[int, str]]:
    me = os.getpid()
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ")"
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == me:
            found.add((int(stat.parent.name), name))
    return frozenset(found)


def held_now() -> Held:
    """What this process holds now."""
    threads = frozenset((t.ident, t.name) for t in threading.enumerate())
    return Held(threads, _fds(), _children())


def left_behind(before: Held, after: Held) -> list[str]:
    """What ``after`` holds that ``before`` did not, one line each (empty: nothing)."""
    old_fds = {target for _, target in before.fds}
    lines = [f"thread {name!r}" for ident, name in sorted(after.threads - before.threads, key=str)]
    lines += [f"file descriptor {fd} -> {target}" for fd, target in after.fds if target not in old_fds]
    lines += [f"child process {pid} ({name})" for pid, name in sorted(after.children - before.children)]
    return lines
