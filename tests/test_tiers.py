"""The quick tier's guard (tests/tiers.py) catches what it looks for, in a suite of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.io
def test_an_unmarked_test_that_opens_a_socket_or_starts_a_thread_fails_by_name_and_a_marked_one_passes(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['tiers']\n"
    )
    (tmp_path / "test_some.py").write_text(
        textwrap.dedent("""
        import asyncio, socket, threading
        import pytest

        def test_pure():
            assert sum(range(4)) == 6

        def test_virtual_time_loop():
            asyncio.run(asyncio.sleep(0))  # the loop's own Unix socket pair is allowed

        def test_socket():
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()

        def test_thread():
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()

        @pytest.mark.io
        def test_marked():
            socket.socket().close()
        """)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYROFLING_TIER"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist",
                           "-o", "markers=io: test", "-rA"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    out = proc.stdout
    assert "2 errors" in out, out[-3000:]  # at the unmarked ones' teardown
    assert "ERROR test_some.py::test_socket" in out and "ERROR test_some.py::test_thread" in out
    assert "this test opened a network socket but is not marked io: mark it @pytest.mark.io" in out
    assert "this test started a thread but is not marked io" in out
    for name in ("test_pure", "test_virtual_time_loop", "test_marked"):
        assert f"PASSED test_some.py::{name}" in out
