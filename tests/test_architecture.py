"""The pure core imports no I/O: sockets, event loops, threads, clocks, codecs or devices (design.md)."""

import ast
from pathlib import Path

import pyrofling

FORBIDDEN = {
    "socket",
    "asyncio",
    "threading",
    "time",
    "select",
    "selectors",
    "subprocess",
    "multiprocessing",
    "av",
    "sounddevice",
    "evdev",
    "uinput",
    "pyglet",
    "pyaudio",
}
ROOT = Path(pyrofling.__file__).parent
PURE = [
    ROOT / "wire.py",
    ROOT / "seqnum.py",
    *sorted((ROOT / "fec").glob("*.py")),
    *sorted((ROOT / "core").glob("*.py")),
    ROOT / "netsim" / "models.py",
    ROOT / "capture" / "messages.py",
]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pure_core_has_no_io_imports() -> None:
    assert len(PURE) >= 9
    for path in PURE:
        bad = _imports(path) & FORBIDDEN
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_check_itself_catches_an_io_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import socket\nfrom asyncio import sleep\n")
    assert _imports(sample) & FORBIDDEN == {"socket", "asyncio"}
