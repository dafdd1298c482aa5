"""Stream through a simulated network from inside a test, and get typed figures back (docs/harness.md).

::

    from pyrofling.harness import Link, run_stream

    result = run_stream(link=Link.gilbert_elliott(seed=7), seconds=10, fec="auto")
    assert result.good_refreshes_pct >= 99

A real host and a real headless viewer (``pyrofling host``, ``pyrofling view --headless``) stream the test
scene through ``pyrofling netsim``; every refresh the viewer makes is judged against the scene. With pytest the
package's plugin gives the ``pyrofling_stream`` fixture and :func:`sweep` (docs/harness.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import product
from typing import Any, TypeVar

from pyrofling.harness.model import DEFAULT_BURSTS, Latency, Link, Second, Stream, StreamResult, result_from
from pyrofling.harness.runner import run_stream

__all__ = [
    "DEFAULT_BURSTS",
    "Latency",
    "Link",
    "Second",
    "Stream",
    "StreamResult",
    "result_from",
    "run_stream",
    "sweep",
]

F = TypeVar("F", bound=Callable[..., Any])


def sweep(**axes: Iterable[Any]) -> Callable[[F], F]:
    """A pytest parametrization over every combination of the axes, with readable test ids::

        @sweep(link=[Link.iid(0.01), Link.gilbert_elliott()], fec=["auto", "none"])
        def test_recovery(pyrofling_stream, link, fec): ...

    runs four tests, ``test_recovery[iid 1.0%, seed 1-auto]`` and so on."""
    import pytest

    if not axes:
        raise ValueError("sweep() needs at least one axis, e.g. sweep(fec=['auto', 'none'])")
    names = list(axes)
    values = [list(v) for v in axes.values()]
    for name, options in zip(names, values, strict=True):
        if not options:
            raise ValueError(f"sweep axis {name!r} has no values")
    cases = list(product(*values))

    def case_id(value: Any) -> str:
        return value.label() if isinstance(value, Link | Stream) else str(value)

    ids = ["-".join(case_id(v) for v in case) for case in cases]
    return pytest.mark.parametrize(names, cases, ids=ids)
