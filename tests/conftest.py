"""Fixtures several test files share: real X servers (Xvfb) to open windows on and to grab, and a pairing
directory of the test run's own."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator

import pytest

from pyrofling.runtime import THREAD_PRIORITIES

pytest_plugins = ["tiers"]


def _start_xvfb(screen: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (scripts/setup installs it)")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", screen, "-nolisten", "tcp", *extra],
        pass_fds=(write_fd,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        display = f.readline().strip()  # Xvfb writes the display number once it is ready
    if not display:
        proc.kill()
        pytest.fail("Xvfb did not start")
    return proc, f":{display}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def xvfb() -> Iterator[str]:
    """One 1280x800 X server for the module (pyglet stays connected to the first display it opens)."""
    proc, display = _start_xvfb("1280x800x24")
    try:
        yield display
    finally:
        _stop(proc)


@pytest.fixture
def x_server() -> Iterator[Callable[..., str]]:
    """Start X servers of a given screen (``x_server("320x240x24", "-wr")``); all stopped after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(screen: str, *extra: str) -> str:
        proc, display = _start_xvfb(screen, *extra)
        procs.append(proc)
        return display

    try:
        yield start
    finally:
        for proc in procs:
            _stop(proc)


@pytest.fixture(autouse=True)
def _ordinary_thread_priorities() -> Iterator[None]:
    """A command a test runs in-process raises its threads' priorities (real-time for some): the test's own
    thread gets its priority back afterwards, and the next test starts with them off, as a library user would."""
    THREAD_PRIORITIES.enabled = False
    tid = threading.get_native_id()
    policy, nice = os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)
    yield
    THREAD_PRIORITIES.enabled = False
    if os.sched_getscheduler(tid) != policy:
        os.sched_setscheduler(tid, policy, os.sched_param(0))
    if os.getpriority(os.PRIO_PROCESS, tid) != nice:
        os.setpriority(os.PRIO_PROCESS, tid, nice)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command a test runs in-process sets the pyrofling logger's level (WARNING for benches): the next test,
    whichever it is on this worker, starts with the levels as they were."""
    loggers = [logging.getLogger(), logging.getLogger("pyrofling")]
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def _own_pairing_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hosts and viewers the tests start (in-process or as commands) keep pairings here, never in the user's
    own configuration."""
    os.environ["PYROFLING_CONFIG_DIR"] = str(tmp_path_factory.mktemp("pairings") / "pyrofling")
    yield
    os.environ.pop("PYROFLING_CONFIG_DIR", None)
