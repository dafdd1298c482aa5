"""A private headless desktop: its own D-Bus session bus, PipeWire, WirePlumber and mutter, in a folder of its own.

Everything runs with ``XDG_RUNTIME_DIR`` (and the state, config and cache
folders) inside a temporary folder of the host's (0700), so two hosts keep two
desktops apart: their Wayland sockets, their buses and their sound never meet.
The desktop's sound card is a PipeWire null sink of its own, its default (for
programs on PipeWire, or PulseAudio through ``pipewire-pulse``), which the host
records (:mod:`.sound`).
Each process is started in a process group of its own, and :meth:`close` ends
them all, last started first.

mutter tells a session manager the variables its programs need (``DISPLAY``,
``XAUTHORITY``, ``WAYLAND_DISPLAY``) through ``org.gnome.SessionManager.Setenv``:
the desktop answers on that name itself, on its own bus, and so learns them
without reading mutter's log.
"""

# No ``from __future__ import annotations`` here: dbus-fast reads the D-Bus signature from the annotations of
# :class:`_SessionManager`'s method, and a postponed ``None`` is not one.
import asyncio
import contextlib
import ctypes
import logging
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from dbus_fast import BusType, Message, NameFlag
from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method

from pyrofling.core.host.headless import DEFAULT_NODES, SINK_CONFIG, missing_packages

log = logging.getLogger(__name__)

#: mutter's names on the bus once it can record and take input.
MUTTER_NAMES = ("org.gnome.Mutter.ScreenCast", "org.gnome.Mutter.RemoteDesktop")
#: How long a process is given to end after SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _end_with_the_host() -> None:
    """In the child, before it runs: SIGTERM when the host ends, however it ends (its own session is no longer
    ended with the host's terminal, so this is what keeps a desktop from outliving a host that crashed)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _desktop_process() -> None:
    """In each of the desktop's own processes: ended with the host, and no core dump (mutter starts Xwayland with
    ``-core``: when mutter died, Xwayland left 20 MB of its memory in the folder the host was started from)."""
    _end_with_the_host()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class DesktopError(RuntimeError):
    """The desktop cannot start; the text says what to do (install what, or why it failed)."""


#: Where X servers make their sockets: it must be writable by all, sticky (systemd's tmpfiles makes it so; a
#: folder made by a server under a umask of 022 is not, and mutter then refuses to start Xwayland).
X11_SOCKETS = Path("/tmp/.X11-unix")


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """End a process started in a session of its own, and what it started (mutter's Xwayland): asked to
    (SIGTERM), then made to once ``grace_s`` passed."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group's others too, when the leader is gone already
    proc.wait()


def _x11_socket_dir() -> None:
    try:
        X11_SOCKETS.mkdir(mode=0o1777, exist_ok=True)
        info = X11_SOCKETS.stat()
        if info.st_mode & 0o1777 != 0o1777 and info.st_uid == os.getuid():
            X11_SOCKETS.chmod(0o1777)
        elif info.st_mode & 0o1777 != 0o1777:
            raise DesktopError(
                f"{X11_SOCKETS} is not writable by all (Xwayland needs it so): sudo chmod 1777 {X11_SOCKETS}"
            )
    except OSError as exc:
        raise DesktopError(f"{X11_SOCKETS} cannot be made ready for Xwayland: {exc.strerror}") from exc


class _SessionManager(ServiceInterface):
    """Just enough of ``org.gnome.SessionManager`` for mutter to tell what its programs need."""

    def __init__(self) -> None:
        super().__init__("org.gnome.SessionManager")
        self.env: dict[str, str] = {}
        self.changed = asyncio.Event()

    @method(name="Setenv")
    def setenv(self, variable: "s", value: "s") -> None:  # type: ignore[name-defined]  # noqa: F821 (D-Bus types)
        self.env[variable] = value
        self.changed.set()


class HeadlessDesktop:
    """``await start()``, :meth:`run` the person's program, :meth:`close`."""

    def __init__(self, *, x11: bool = True, name: str = "pyrofling") -> None:
        self.x11 = x11
        self.name = name
        self.root: Path | None = None
        self.env: dict[str, str] = {}
        #: What the desktop's programs are given (``WAYLAND_DISPLAY``, ``DISPLAY``, ``XAUTHORITY``).
        self.display_env: dict[str, str] = {}
        self.bus: MessageBus | None = None
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._manager = _SessionManager()
        self.started_s: float | None = None

    @property
    def runtime_dir(self) -> Path:
        assert self.root is not None
        return self.root / "run"

    @property
    def pipewire_socket(self) -> Path:
        return self.runtime_dir / "pipewire-0"

    async def start(self, timeout_s: float = 15.0) -> None:
        """Start the bus, PipeWire, WirePlumber and mutter, and wait until mutter can record (DesktopError if it
        cannot: what to install, or which process ended)."""
        missing = missing_packages(lambda program: shutil.which(program) is not None, x11=self.x11)
        if missing:
            raise DesktopError(f"a headless desktop needs {', '.join(missing)}: apt-get install {' '.join(missing)}")
        if self.x11:
            _x11_socket_dir()
        began = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.name}-desktop-"))
        for sub in ("run", "state", "config", "cache", "data", "log"):
            (self.root / sub).mkdir(mode=0o700)
        bus_path = self.runtime_dir / "bus"
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY")}
        env.update(
            XDG_RUNTIME_DIR=str(self.runtime_dir),
            XDG_STATE_HOME=str(self.root / "state"),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_CACHE_HOME=str(self.root / "cache"),
            XDG_DATA_HOME=str(self.root / "data"),  # the desktop portal's permission store, among others
            DBUS_SESSION_BUS_ADDRESS=f"unix:path={bus_path}",
        )
        self.env = env
        # The desktop's sound card, made by PipeWire as it starts, and WirePlumber's default from the first.
        pipewire_conf = self.root / "config" / "pipewire" / "pipewire.conf.d"
        pipewire_conf.mkdir(parents=True)
        (pipewire_conf / "pyrofling-sink.conf").write_text(SINK_CONFIG)
        (self.root / "state" / "wireplumber").mkdir()
        (self.root / "state" / "wireplumber" / "default-nodes").write_text(DEFAULT_NODES)
        try:
            async with asyncio.timeout(timeout_s):
                self._spawn("dbus-daemon", ["dbus-daemon", "--session", f"--address=unix:path={bus_path}",
                                            "--nofork", "--nopidfile"])  # fmt: skip
                await self._listening(bus_path)
                self.bus = await MessageBus(
                    bus_address=env["DBUS_SESSION_BUS_ADDRESS"], bus_type=BusType.SESSION
                ).connect()
                self.bus.export("/org/gnome/SessionManager", self._manager)
                await self.bus.request_name("org.gnome.SessionManager", NameFlag.DO_NOT_QUEUE)
                self._spawn("pipewire", ["pipewire"])
                await self._listening(self.pipewire_socket)  # its clients fail at once without it
                self._spawn("wireplumber", ["wireplumber"])
                self._spawn("pipewire-pulse", ["pipewire-pulse"])  # programs that play through PulseAudio
                self._spawn("mutter", ["mutter", "--headless", "--wayland", *([] if self.x11 else ["--no-x11"])])
                await self._wait_for_mutter()
        except TimeoutError:
            self.close()
            raise DesktopError(f"the headless desktop did not start within {timeout_s:g} s") from None
        except BaseException:
            self.close()
            raise
        self.started_s = time.monotonic() - began
        log.info(
            "headless desktop up in %.2f s (%s)",
            self.started_s,
            ", ".join(f"{k}={v}" for k, v in sorted(self.display_env.items()) if k != "XAUTHORITY"),
        )

    async def restart_compositor(self, timeout_s: float = 15.0) -> None:
        """mutter ended: end what it leaves (Xwayland, the program, which lose their display), start it again on the
        same bus and PipeWire, and wait until it can record (DesktopError if it cannot)."""
        for entry in [e for e in self._processes if e[0] in ("mutter", "program")]:
            _end_group(entry[1], 0.5)
            self._processes.remove(entry)
        self._manager.env.clear()
        self.display_env = {}
        self._spawn("mutter", ["mutter", "--headless", "--wayland", *([] if self.x11 else ["--no-x11"])])
        try:
            async with asyncio.timeout(timeout_s):
                await self._wait_for_mutter()
        except TimeoutError:
            raise DesktopError(f"mutter did not start again within {timeout_s:g} s") from None

    async def _listening(self, path: Path) -> None:
        """Until a connection to the Unix socket at ``path`` is accepted: the file appears at its bind, a moment
        before its listen on a busy machine, and a client that comes in between is refused."""
        while True:
            self._check_alive()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(str(path))
                    return
                except (FileNotFoundError, ConnectionRefusedError):
                    pass
            await asyncio.sleep(0.005)

    async def _wait_for_mutter(self) -> None:
        assert self.bus is not None
        wanted = {"WAYLAND_DISPLAY", *(("DISPLAY", "XAUTHORITY") if self.x11 else ())}
        while True:
            self._check_alive()
            names = await self._names()
            if all(n in names for n in MUTTER_NAMES) and wanted <= self._manager.env.keys():
                self.display_env = {k: self._manager.env[k] for k in sorted(wanted)}
                return
            self._manager.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._manager.changed.wait(), 0.02)

    async def _names(self) -> list[str]:
        assert self.bus is not None
        reply = await self.bus.call(
            Message(
                destination="org.freedesktop.DBus",
                path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus",
                member="ListNames",
            )
        )
        return list(reply.body[0]) if reply is not None and reply.body else []

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.root is not None
        with (self.root / "log" / f"{name}.log").open("ab") as log_file:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_desktop_process, cwd=self.root,
            )  # fmt: skip
        self._processes.append((name, proc))

    def _check_alive(self) -> None:
        ended = self.ended()
        if ended is not None:
            raise DesktopError(f"the headless desktop's {ended} ended as it started{self.last_words(ended)}")

    def last_words(self, name: str) -> str:
        """``": "`` and the last line one of the desktop's processes wrote (its error, usually), or nothing."""
        if self.root is None:
            return ""
        try:
            lines = (self.root / "log" / f"{name}.log").read_bytes()[-4096:].decode(errors="replace").splitlines()
        except OSError:
            return ""
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return f": {last}" if last else ""

    def ended(self) -> str | None:
        """The first of the desktop's own processes that has ended (None: all run)."""
        return next((name for name, proc in self._processes if name != "program" and proc.poll() is not None), None)

    def run(self, command: str) -> subprocess.Popen[bytes]:
        """The person's program, in the desktop (its output goes where the host's does)."""
        argv = shlex.split(command)
        if not argv:
            raise ValueError("--run needs a command: the program to start in the desktop")
        if shutil.which(argv[0], path=self.env.get("PATH")) is None:
            raise DesktopError(f"--run: {argv[0]!r} is not a program on PATH")
        proc = subprocess.Popen(argv, env={**self.env, **self.display_env}, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_end_with_the_host)  # fmt: skip
        self._processes.append(("program", proc))
        return proc

    def close(self) -> None:
        """End everything the desktop started (its program first, the bus last) and remove its folder."""
        if self.bus is not None:
            self.bus.disconnect()
            self.bus = None
        for _, proc in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for _, proc in reversed(self._processes):
            _end_group(proc, max(0.0, deadline - time.monotonic()))
        self._processes.clear()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
