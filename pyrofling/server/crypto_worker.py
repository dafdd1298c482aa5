"""Where the host runs the PAKE's slow steps (:class:`~pyrofling.core.host.state.Compute`): a process of its own.

SPAKE2 is pure Python, 4–6 ms a step.  In a thread of the host it holds the
interpreter lock that the encode thread, the heartbeat and the event loop each
need between their own steps, so a flood of handshakes stretched every frame's
path (on the 16-CPU machine, the first moment of ``bench security``'s flood
repeated four refreshes in a row).  In its own process, at a lower priority, it
takes only CPU time the stream's threads leave.

The worker is this module run by the host's own interpreter in isolated mode
(``-I``: no working directory, no ``PYTHONPATH``, no user site on its import
path), with the folder the host's own ``pyrofling`` came from put first, so that
only the package the host runs is imported into it: ``python -m`` would put the
working directory first, and a ``pyrofling/`` planted there by another user (a
host started from a shared folder) would run with the host's rights.  It is fed
pickled steps on its stdin and answers on its stdout, length-prefixed.  Not
:mod:`multiprocessing`: its ``spawn`` runs the parent's main script again in the
child, and a program that embeds a :class:`~pyrofling.server.host.Host` need not
guard its main.  Only the host writes to the worker and only the worker answers,
so the pickles never cross a trust boundary.  Where no process can be started a
thread does the work, as before, and the log says so; a worker that dies fails
the steps it had (those handshakes time out, the viewers try again) and the next
step starts a new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

#: How much nicer than the host the worker runs: handshakes wait, frames do not. Only where the host sets its
#: threads' priorities (``--thread-priority auto``, the default of ``pyrofling host``): with ``normal``, or in a
#: program that embeds a host, every priority is left as it is, the worker's too (beside other work at the same
#: nice value, +10 starved its handshakes past the viewers' 5 s).
WORKER_NICENESS = 10
_LENGTH = struct.Struct("<I")
_READY = -1  # the job id of the worker's first answer: started, its modules imported


class WorkerDied(RuntimeError):
    """The worker process ended with this step unanswered."""


#: What the worker's interpreter runs: the host's own package first on its path, then :func:`main`.
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from pyrofling.server.crypto_worker import main; sys.exit(main())"


def worker_command() -> list[str]:
    """The worker's command line: isolated from the working directory and the environment, importing only the
    ``pyrofling`` the host itself runs."""
    from pyrofling.runtime import THREAD_PRIORITIES

    package_root = Path(__file__).resolve().parents[2]  # the folder holding the host's pyrofling/
    niceness = WORKER_NICENESS if THREAD_PRIORITIES.enabled else 0
    return [sys.executable, "-I", "-c", _BOOT, str(package_root), str(niceness)]


class _Process:
    """One worker process and the thread that reads its answers."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready: Future[Any] = Future()
        self._pending: dict[int, Future[Any]] = {_READY: self.ready}
        self._lock = threading.Lock()
        self._next = 0
        threading.Thread(target=self._read, name="pyrofling-pake-answers", daemon=True).start()

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        done: Future[Any] = Future()
        with self._lock:
            job, self._next = self._next, self._next + 1
            self._pending[job] = done
            data = pickle.dumps((job, work))
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(_LENGTH.pack(len(data)) + data)
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                del self._pending[job]
                done.set_exception(WorkerDied(f"the worker is gone ({exc})"))
        return done

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while (answer := _read_message(self.proc.stdout)) is not None:
                job, ok, value = answer
                with self._lock:
                    done = self._pending.pop(job, None)
                if done is None or done.done():
                    continue
                if ok:
                    done.set_result(value)
                else:
                    done.set_exception(RuntimeError(value))
        except (OSError, ValueError, pickle.UnpicklingError, EOFError):
            pass
        with self._lock:
            left, self._pending = self._pending, {}
        for done in left.values():
            if not done.done():
                done.set_exception(WorkerDied("the worker process ended"))

    def close(self) -> None:
        """End it now (on the host's loop: nothing here waits for a step to finish)."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


class CryptoWorker:
    """The host's worker: :meth:`start` (or the first :meth:`submit`) starts it; one that died is replaced."""

    def __init__(self) -> None:
        self._process: _Process | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._ended_cpu_s = 0.0  # of workers replaced or closed

    @property
    def in_process(self) -> bool:
        return self._thread is None

    def cpu_s(self) -> float:
        """CPU time the worker processes used so far (Linux; elsewhere 0): part of what the host costs."""
        total = self._ended_cpu_s
        if self._process is not None:
            total += process_cpu_s(self._process.proc.pid)
        return total

    def start(self) -> Future[Any]:
        """Start the process now (a host that takes codes does as it starts listening); the future is done when
        it can take steps at once."""
        if self._thread is not None:
            return _done()
        if self._process is None:
            try:
                self._process = _Process()
            except OSError as exc:
                self._use_thread(f"no worker process: {exc}")
                return _done()
        return self._process.ready

    async def started(self, timeout_s: float = 10.0) -> None:
        """:meth:`start`, and wait until the worker can take steps; a worker that cannot start in time leaves the
        steps to a thread."""
        import asyncio

        try:
            await asyncio.wait_for(asyncio.wrap_future(self.start()), timeout_s)
        except (TimeoutError, WorkerDied) as exc:
            self._use_thread(f"the worker process did not start: {exc or 'timed out'}")

    def _use_thread(self, why: str) -> None:
        log.warning("handshakes run in a thread of the host (%s)", why)
        self.failed()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="pyrofling-pake")

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        self.start()
        if self._thread is not None:
            return self._thread.submit(work)
        assert self._process is not None
        return self._process.submit(work)

    def failed(self) -> None:
        """A step did not come back: the next one starts a new process."""
        process, self._process = self._process, None
        if process is not None:
            self._ended_cpu_s += process_cpu_s(process.proc.pid)
            process.close()

    def close(self) -> None:
        self.failed()
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)


def process_cpu_s(pid: int) -> float:
    """User and system time of a running process, from /proc (0 where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _done() -> Future[Any]:
    done: Future[Any] = Future()
    done.set_result(True)
    return done


def _read_message(stream: IO[bytes]) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


def _write_message(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def main() -> int:
    """The worker: run each step it is given, answer with its result (or why it failed), until its input ends."""
    niceness = int(sys.argv[2]) if len(sys.argv) > 2 else WORKER_NICENESS
    if niceness:
        with contextlib.suppress(OSError):
            os.nice(niceness)
    import pyrofling.core.secure  # noqa: F401  (the steps' code: imported before the first one comes)

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    _write_message(out, (_READY, True, True))
    while (message := _read_message(inp)) is not None:
        job, work = message
        try:
            _write_message(out, (job, True, work()))
        except Exception as exc:  # a step's own error goes back to the host, which logs it
            _write_message(out, (job, False, f"{type(exc).__name__}: {exc}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
