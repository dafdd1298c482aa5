"""A process that crashes says where, and one whose worker outlived its stop leaves without the teardown that
could crash it: what the soak reports when a viewer dies of a signal."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyrofling.bench.soak import _crash_report


@pytest.mark.io
def test_the_command_line_prints_every_threads_stack_when_a_native_library_crashes(tmp_path: Path) -> None:
    """The CLI turns Python's fault handler on: a segfault (made here with faulthandler's own) prints the
    stack where it happened, which the soak then quotes with whether the last statistics were written."""
    script = textwrap.dedent(
        """
        import faulthandler, sys
        from pyrofling.cli import main
        try:
            main(["--version"])
        except SystemExit:
            pass
        assert faulthandler.is_enabled()
        def decode_the_last_picture():
            faulthandler._sigsegv()
        decode_the_last_picture()
        """
    )
    log = tmp_path / "viewer2.log"
    with log.open("wb") as err:
        proc = subprocess.run([sys.executable, "-X", "faulthandler=0", "-c", script], stderr=err, timeout=60)
    assert proc.returncode == -11
    lines = _crash_report("viewer2", -proc.returncode, log, {"timeline": []})
    assert lines[0] == "viewer2 died of SIGSEGV after writing its last statistics; its log ends:"
    text = "\n".join(lines)
    assert "Fatal Python error: Segmentation fault" in text and "decode_the_last_picture" in text
    assert _crash_report("viewer2", 11, log, {})[0].endswith("before its last statistics; its log ends:")
    assert _crash_report("host", 6, tmp_path / "none.log", {}) == ["host died of SIGABRT; its log ends:"]


@pytest.mark.io
def test_a_viewer_whose_worker_did_not_stop_leaves_at_once_with_its_own_status() -> None:
    """A decoder thread still inside its work after its join timed out: the command exits with the status it
    meant to (not the signal an interpreter torn down under the thread may die of), saying which thread."""
    script = textwrap.dedent(
        """
        import logging, sys, threading
        from pyrofling.cli.options import leave_if_workers_linger
        logging.basicConfig()
        log = logging.getLogger("pyrofling.view")
        started = threading.Event()
        def busy():
            started.set()
            threading.Event().wait()  # never set: a decode that does not end
        threading.Thread(target=busy, name="pyrofling-decode", daemon=True).start()
        started.wait(10)
        leave_if_workers_linger(3, log)
        print("went on")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and "went on" not in proc.stdout
    assert "pyrofling-decode still running after the stop; leaving without waiting for it" in proc.stderr
    quiet = script.replace('name="pyrofling-decode"', 'name="someone-elses"')
    proc = subprocess.run([sys.executable, "-c", quiet], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "went on\n" and proc.stderr == ""
