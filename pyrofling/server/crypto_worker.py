"""Where the host runs the PAKE's slow steps (:class:`~pyrofling.core.host.state.Compute`): a process of its own.

SPAKE2 is pure Python, 4–6 ms a step.  In a thread of the host it holds the
interpreter lock that the encode thread, the heartbeat and the event loop each
need between their own steps, so a flood of handshakes stretched every frame's
path (on the lent 16-CPU machine, the first moment of ``bench security``'s flood
repeated four refreshes in a row).  In its own process, at a lower priority, it
takes only CPU time the stream's threads leave.  Where no process can be started
(no ``/dev/shm`` for its locks, say) a thread does the work, as before, and the
log says so.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

#: How much nicer than the host the worker runs: handshakes wait, frames do not.
WORKER_NICENESS = 10


def _worker_started() -> None:
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


def _ready() -> bool:
    return True


class CryptoWorker:
    """One worker process, started by :meth:`start` (or the first :meth:`submit`) and replaced if it dies."""

    def __init__(self) -> None:
        self._pool: Executor | None = None
        self.in_process = True

    def start(self) -> None:
        """Start the process now (a host that takes codes calls it as it starts listening), so that the first
        handshake does not wait for an interpreter to start."""
        if self._pool is not None:
            return
        if self.in_process:
            try:
                pool = ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_started
                )
                pool.submit(_ready)  # starts the process; nothing waits for it
                self._pool = pool
                return
            except (OSError, NotImplementedError, RuntimeError) as exc:
                log.warning("handshakes run in a thread of the host (no worker process: %s)", exc)
                self.in_process = False
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pyrofling-pake")

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        self.start()
        assert self._pool is not None
        return self._pool.submit(work)

    def failed(self) -> None:
        """A step did not come back (the process died): the next one starts a new process."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.failed()
