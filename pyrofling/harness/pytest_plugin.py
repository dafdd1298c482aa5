"""pyrofling's pytest plugin, loaded by pytest through the package's ``pytest11`` entry point (docs/harness.md).

Fixtures:

- ``pyrofling_link``: the link a test streams through (default: perfect). Override it with a fixture of that name,
  or parametrize it (``@sweep(pyrofling_link=[...])``).
- ``pyrofling_stream``: ``pyrofling_stream(link=None, **options)`` runs :func:`pyrofling.harness.run_stream`
  through ``link`` (default: ``pyrofling_link``) and returns the :class:`~pyrofling.harness.StreamResult`;
  options are :class:`~pyrofling.harness.Stream`'s fields, over those of the test's ``pyrofling_stream`` marker.

When a test that streamed fails, its report gets a "pyrofling streams" section: each run's figures in one line.
A suite that uses none of this loads nothing more than this module (no codec, no numpy, no processes).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyrofling.harness.model import Link, StreamResult

_RUNS = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pyrofling_stream(**options): defaults for the pyrofling_stream fixture in this test (Stream's fields, "
        "and timeout_s)",
    )


@pytest.fixture
def pyrofling_link() -> Link:
    """The link ``pyrofling_stream`` streams through when the test names none: a perfect one."""
    from pyrofling.harness.model import Link

    return Link()


@pytest.fixture
def pyrofling_stream(request: pytest.FixtureRequest, pyrofling_link: Link) -> Callable[..., StreamResult]:
    """Stream through a link and return what the player saw (:func:`pyrofling.harness.run_stream`)."""
    from pyrofling.harness.runner import run_stream

    marker = request.node.get_closest_marker("pyrofling_stream")
    defaults: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    runs = request.node.stash.setdefault(_RUNS, [])

    def stream(link: Link | None = None, **options: Any) -> StreamResult:
        result = run_stream(link=link or pyrofling_link, **(defaults | options))
        runs.append(str(result))
        return result

    return stream


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    runs = item.stash.get(_RUNS, None)
    if runs and report.failed:
        report.sections.append(("pyrofling streams", "\n".join(runs)))
