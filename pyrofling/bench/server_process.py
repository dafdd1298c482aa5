"""A real server the tests and benches start as one process (nginx-rtmp, Janus): killed by pid as a crash would
end it, stopped politely, its log's last lines for an error message."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self


class ServerProcess:
    """``start()`` is the server's own; ``with server:`` starts and stops it; ``kill()`` mid-stream."""

    proc: subprocess.Popen[bytes] | None = None
    log: Path

    def start(self, timeout_s: float = 10.0) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL by pid, as a crash or a pulled plug would end it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def log_tail(self, lines: int = 5) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
