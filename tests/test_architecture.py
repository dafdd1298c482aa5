"""The layout holds: the pure core loads no I/O, however deep its imports go, and no module imports in a cycle.

Imports are followed through pyrofling's own modules, transitively, counting the
package ``__init__`` every import runs and the imports inside functions (they
run too, only later), but not those under ``if TYPE_CHECKING:`` (they never
run).  Modules outside pyrofling are leaves: what they import is theirs.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import pyrofling

ROOT = Path(pyrofling.__file__).parent
#: What a pure module may not import: clocks, sockets, threads, event loops, the OS, processes, codecs, devices.
FORBIDDEN = frozenset(
    {
        "os",
        "socket",
        "asyncio",
        "threading",
        "time",
        "select",
        "selectors",
        "signal",
        "subprocess",
        "multiprocessing",
        "concurrent",
        "pathlib",
        "tempfile",
        "av",
        "sounddevice",
        "samplerate",
        "evdev",
        "uinput",
        "pyglet",
        "pyaudio",
    }
)
#: The pure core: decisions that take ``now`` and return what to do (docs/architecture.md).
PURE_PACKAGES = ("pyrofling.wire", "pyrofling.fec", "pyrofling.core")
PURE_MODULES = ("pyrofling.seqnum", "pyrofling.units", "pyrofling.netsim.models")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in ROOT.rglob("*.py")}
PURE = sorted(m for m in MODULES if m.startswith(PURE_PACKAGES) or m in PURE_MODULES)


def _resolve(module: str, level: int, importer: str) -> str:
    if not level:
        return module
    base = importer.split(".")
    if MODULES[importer].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """(pyrofling modules it imports directly, other top-level modules it imports), anywhere in the file."""
    ours, others = _imports_in(module, MODULES[module].read_text())
    return set(ours), set(others)


@functools.cache
def _imports_in(module: str, text: str) -> tuple[frozenset[str], frozenset[str]]:
    """``imports_of`` for one text of the module (each file is parsed once a run, not once a check)."""
    ours: set[str] = set()
    others: set[str] = set()
    tree = ast.parse(text)
    for guard in [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]:
        guard.body = []  # imports for the type checker alone never run
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, module)
            # ``from package import name`` imports the submodule when ``name`` is one.
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        for name in names:
            if name.split(".")[0] == "pyrofling":
                ours.add(name)
            else:
                others.add(name.split(".")[0])
    return frozenset(ours - {module}), frozenset(others)


def _with_packages(module: str) -> set[str]:
    """A module and every package ``__init__`` that importing it runs."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)


def loaded_by(module: str) -> dict[str, set[str]]:
    """Every pyrofling module importing ``module`` runs, transitively, with what each imports from outside."""
    seen: dict[str, set[str]] = {}
    todo = list(_with_packages(module))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        ours, others = imports_of(name)
        seen[name] = others
        for dep in ours:
            todo += _with_packages(dep)
    return seen


def test_the_pure_set_is_the_core() -> None:
    assert {"pyrofling.wire.control", "pyrofling.core.viewer.connection", "pyrofling.core.host.sessions"} <= set(PURE)
    assert not [m for m in PURE if m.startswith(("pyrofling.server", "pyrofling.client", "pyrofling.cli"))]


@pytest.mark.parametrize("module", PURE)
def test_the_pure_core_loads_no_io_however_deep(module: str) -> None:
    for name, others in loaded_by(module).items():
        assert name in PURE or name in ("pyrofling", "pyrofling.netsim"), f"{module} loads {name}, not pure"
        bad = others & FORBIDDEN
        assert not bad, f"{module} loads {name}, which imports {sorted(bad)}"


@pytest.mark.io
def test_importing_the_pure_core_loads_no_socket_loop_or_codec() -> None:
    """The same, measured in a fresh interpreter: what ``sys.modules`` holds after importing every pure module."""
    code = f"import sys; import {', '.join(PURE)}; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not loaded & {"socket", "asyncio", "threading", "av", "pyglet", "sounddevice", "evdev", "uinput"}


def _cycles() -> list[list[str]]:
    """Strongly connected groups of more than one module in the import graph (Tarjan)."""
    graph = {m: imports_of(m)[0] & set(MODULES) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(graph):
        if m not in index:
            visit(m)
    return groups


def test_no_import_cycles_anywhere() -> None:
    assert _cycles() == []


#: The core's layers, and which others each may load: the host's and the viewer's decisions never meet; both
#: use the players' input and the shared modules at the core's top, which use neither.
LAYERS = {
    "pyrofling.core.host": ("pyrofling.core.input",),
    "pyrofling.core.viewer": ("pyrofling.core.input",),
    "pyrofling.core.input": (),
}


def layer_of(module: str) -> str | None:
    """The layer a core module belongs to; None for the shared modules at the core's top and anything else."""
    return next((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), None)


def layer_violations(module: str) -> list[str]:
    """The modules of a layer ``module`` may not use that importing it loads, however deep."""
    own = layer_of(module)
    allowed = {None, own, *LAYERS.get(own or "", ())}
    return sorted(n for n in loaded_by(module) if n.startswith("pyrofling.core") and layer_of(n) not in allowed)


CORE = sorted(m for m in MODULES if m.startswith("pyrofling.core"))


def test_every_core_module_is_in_a_layer_or_shared_and_the_layers_exist() -> None:
    assert {layer_of(m) for m in CORE} == {None, *LAYERS}
    shared = [m for m in CORE if layer_of(m) is None]
    assert "pyrofling.core.secure" in shared and "pyrofling.core.host.sessions" not in shared


@pytest.mark.parametrize("module", CORE)
def test_the_host_and_the_viewer_never_import_each_other(module: str) -> None:
    assert layer_violations(module) == [], f"{module} ({layer_of(module) or 'shared'}) loads another layer"


def test_the_checks_catch_what_they_look_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fake modules that import each other, one of them a pure one that loads a socket through the other."""
    pure = tmp_path / "a.py"
    shell = tmp_path / "b.py"
    pure.write_text("def f():\n    from pyrofling.server import b\n")
    shell.write_text("import socket\nfrom pyrofling.core import a\n")
    monkeypatch.setitem(MODULES, "pyrofling.core.a", pure)
    monkeypatch.setitem(MODULES, "pyrofling.server.b", shell)
    loaded = loaded_by("pyrofling.core.a")
    assert "pyrofling.server.b" in loaded and "socket" in loaded["pyrofling.server.b"]
    assert ["pyrofling.core.a", "pyrofling.server.b"] in _cycles()
    # An import for the type checker alone never runs: no cycle through it.
    pure.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pyrofling.server import b\n")
    assert "pyrofling.server.b" not in imports_of("pyrofling.core.a")[0]
    assert ["pyrofling.core.a", "pyrofling.server.b"] not in _cycles()


def test_the_layer_check_catches_a_host_module_that_loads_the_viewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = tmp_path / "h.py"
    host.write_text("from pyrofling.core.viewer import reassembler\n")
    shared = tmp_path / "s.py"
    shared.write_text("from pyrofling.core.input import pad\n")
    monkeypatch.setitem(MODULES, "pyrofling.core.host.h", host)
    monkeypatch.setitem(MODULES, "pyrofling.core.s", shared)
    assert "pyrofling.core.viewer.reassembler" in layer_violations("pyrofling.core.host.h")
    assert "pyrofling.core.input.pad" in layer_violations("pyrofling.core.s")


#: A shell is small enough to read in one sitting (docs/architecture.md, "Size").
SHELL_LINES = 450
#: The FFI adapter to the Vulkan driver: one binding per call it makes, nothing to decide.
SHELL_EXEMPT = {"pyrofling.server.vulkan_import"}
#: Shells still waiting to be split, with their size when listed: the list may only shrink.
SHELL_WAITING: dict[str, int] = {}


def _lines(module: str) -> int:
    return len(MODULES[module].read_text().splitlines())


def test_every_shell_module_is_small_enough_to_read_in_one_sitting() -> None:
    shells = [m for m in MODULES if m.startswith(("pyrofling.server", "pyrofling.client"))]
    over = {m: _lines(m) for m in shells if m not in SHELL_EXEMPT and _lines(m) > SHELL_LINES}
    assert over.keys() == SHELL_WAITING.keys(), "a shell grew past the limit, or one waiting was split: update the list"
    grown = {m: n for m, n in over.items() if n > SHELL_WAITING[m]}
    assert not grown, f"shells waiting to be split grew: {grown}"


def test_the_browsers_take_the_viewers_one_timer_and_the_web_shell_keeps_none() -> None:
    """The browsers' core is the host's sessions' (``HostSessions.browsers``): their deadlines come out of the
    network's one timer, ``server/web.py`` arms nothing of its own and what a browser does goes through the
    sessions (``HostSessions.from_browsers``) to ``HostNetwork.perform``, as a viewer's does."""
    tree = ast.parse((ROOT / "server" / "web.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not names & {"DeadlineTimer", "call_later", "call_at", "sleep"}, names & {"DeadlineTimer", "call_later"}
    # Nor does it relay what a browser does to the sessions: ``HostSessions.from_browsers`` takes the players' part.
    relayed = {"BrowserJoined", "BrowserInput", "BrowserRateReport", "BrowserDisplay", "BrowserLeft",
               "RequestKeyframe", "KeyframePolicy", "browser_joined", "browser_input", "browser_rate_feedback",
               "browser_left"}  # fmt: skip
    assert not names & relayed, names & relayed
    assert "from_browsers" in names
    sessions = ast.parse((ROOT / "core" / "host" / "sessions.py").read_text())
    assert any(isinstance(n, ast.Attribute) and n.attr == "browsers" for n in ast.walk(sessions))
