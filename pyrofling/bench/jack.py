"""A JACK server with the dummy driver: a real audio clock on a machine without a sound card.

The ALSA ``null`` device swallows samples as fast as they come, so it cannot test
buffering; JACK's dummy driver runs a real period clock (docs/audio.md).  The audio
tests and ``pyrofling bench audio`` start one of their own under a unique server
name, point ``JACK_DEFAULT_SERVER`` at it (child processes inherit it) and stop it
by pid afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

from pyrofling.client.audio.devices import terminate_portaudio


class JackUnavailable(RuntimeError):
    """jackd is not installed or did not start."""


@contextlib.contextmanager
def dummy_jack(*, rate: int = 48_000, period: int = 256, name: str | None = None) -> Iterator[str]:
    """Run ``jackd --no-realtime -d dummy`` for the duration of the block; yields the server name."""
    jackd = shutil.which("jackd")
    if jackd is None:
        raise JackUnavailable("jackd is not installed (scripts/setup installs Debian's jackd2)")
    name = name or f"pyrofling-{os.getpid()}"
    # Its messages go to a file: a pipe nobody reads fills up in a few minutes of xrun reports, and
    # then jackd blocks writing to it and stops calling every client (the soak found that).
    log_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below, after jackd)
    proc = subprocess.Popen(
        [jackd, "--no-realtime", "-n", name, "-d", "dummy", "-r", str(rate), "-p", str(period)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    before = os.environ.get("JACK_DEFAULT_SERVER")
    try:
        waiter = shutil.which("jack_wait")
        ready = False
        if waiter is not None:
            result = subprocess.run(
                [waiter, "-s", name, "-w", "-t", "10"], capture_output=True, timeout=15, check=False
            )
            ready = result.returncode == 0 and proc.poll() is None
        if not ready:
            proc.kill()
            proc.wait(timeout=5)
            log_file.seek(0)
            err = log_file.read().decode(errors="replace").strip()
            raise JackUnavailable(f"jackd did not start: {err.splitlines()[-1] if err else 'no output'}")
        os.environ["JACK_DEFAULT_SERVER"] = name
        yield name
    finally:
        # PortAudio's JACK client must let go before the server goes, or its exit handler aborts.
        terminate_portaudio()
        if before is None:
            os.environ.pop("JACK_DEFAULT_SERVER", None)
        else:
            os.environ["JACK_DEFAULT_SERVER"] = before
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.close()
