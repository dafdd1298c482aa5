"""A real Janus SFU for tests and benches: Debian's janus with its streaming plugin and HTTP API, on loopback.

It runs as one process with a configuration folder of its own (only the streaming plugin and the HTTP transport
loaded), so it can be killed by pid and started again on the same port, the way an SFU goes away under a live
stream. ``info(id, secret)`` asks the streaming plugin what a mountpoint has received.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from pyrofling.bench.netns import Namespace
from pyrofling.bench.server_process import ServerProcess
from pyrofling.server.janus_api import JanusApi, JanusError

log = logging.getLogger(__name__)

INSTALL_HINT = "install Janus: apt-get install janus (scripts/setup does)"
PLUGINS = Path("/usr/lib/x86_64-linux-gnu/janus")
#: Plugins a JanusServer may load: the streaming plugin (mountpoints), and the VideoRoom (an origin's room).
PLUGIN_FILES = {"streaming": "libjanus_streaming.so", "videoroom": "libjanus_videoroom.so"}
_KEEP_TRANSPORTS = {"libjanus_http.so"}


def missing() -> str | None:
    """Why Janus cannot be started here, or None."""
    if shutil.which("janus") is None:
        return f"janus is not installed; {INSTALL_HINT}"
    if not (PLUGINS / "plugins" / "libjanus_streaming.so").exists():
        return f"Janus's streaming plugin is not where Debian puts it ({PLUGINS}); {INSTALL_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _others(folder: str, keep: set[str]) -> str:
    return ",".join(sorted(p.name for p in (PLUGINS / folder).glob("*.so") if p.name not in keep))


class _ExitedAtStart(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class JanusServer(ServerProcess):
    """``with JanusServer(workdir, admin_key=…) as janus: janus.url``; ``kill()`` and ``start()`` mid-stream."""

    def __init__(
        self,
        workdir: Path,
        *,
        admin_key: str | None = None,
        port: int | None = None,
        netns: Namespace | None = None,
        plugins: tuple[str, ...] = ("streaming",),
    ) -> None:
        """``netns``: run in that namespace, its API on the namespace's address and ICE on its veth (WebRTC
        spectators can reach it); else on loopback (publishing only: ICE gathers nothing there). ``plugins``:
        of :data:`PLUGIN_FILES` (``videoroom`` too for a cascade's origin)."""
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        self.workdir, self.port, self.admin_key, self.netns = workdir, port or _free_port(), admin_key, netns
        self.address = netns.inside if netns is not None else "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "janus.log"
        conf = workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "janus.jcfg").write_text(
            "general: {\n"
            f'  configs_folder = "{conf}"\n'
            f'  plugins_folder = "{PLUGINS / "plugins"}"\n'
            f'  transports_folder = "{PLUGINS / "transports"}"\n'
            f'  events_folder = "{PLUGINS / "events"}"\n'
            f'  loggers_folder = "{PLUGINS / "loggers"}"\n'
            "  debug_level = 4\n"
            "  session_timeout = 60\n"
            "}\n"
            f'plugins: {{ disable = "{_others("plugins", {PLUGIN_FILES[p] for p in plugins})}" }}\n'
            f'transports: {{ disable = "{_others("transports", _KEEP_TRANSPORTS)}" }}\n'
            f'loggers: {{ disable = "{_others("loggers", set())}" }}\n'
            "events: { broadcast = false }\n"
            + (f'nat: {{ ice_enforce_list = "{netns.inside_link}" }}\n' if netns is not None else "")
        )
        streaming = f'general: {{ admin_key = "{admin_key}" }}\n' if admin_key else "general: { }\n"
        (conf / "janus.plugin.streaming.jcfg").write_text(streaming)
        (conf / "janus.plugin.videoroom.jcfg").write_text(streaming)  # the same admin_key: rooms, forwarders
        (conf / "janus.transport.http.jcfg").write_text(
            f'general: {{ base_path = "/janus" http = true port = {self.port} ip = "{self.address}" }}\n'
            "admin: { admin_http = false }\n"
        )
        self.config = conf / "janus.jcfg"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/janus"

    def start(self, timeout_s: float = 15.0) -> None:
        """Start it and wait for its API. Janus has been seen to end right after making its certificate on a
        loaded 2-core machine, its last lines lost with its buffered output: it gets one more start, and the
        exit status is said if that one ends too."""
        try:
            self._start(timeout_s)
        except _ExitedAtStart as first:
            log.warning("janus exited at start (status %s); starting it once more", first.status)
            self._start(timeout_s)

    def _start(self, timeout_s: float) -> None:
        with self.log.open("ab") as out:
            argv = ["janus", "-F", str(self.config.parent), "-C", str(self.config), "-o"]
            argv = self.netns.command(argv) if self.netns is not None else argv
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (status := self.proc.poll()) is not None:
                raise _ExitedAtStart(status, f"janus exited at start (status {status}): {self.log_tail()}")
            with contextlib.suppress(JanusError):
                if JanusApi(self.url).post("", {"janus": "info"}, timeout_s=5).get("janus") == "server_info":
                    return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"janus did not answer on port {self.port} within {timeout_s:g} s: {self.log_tail()}")

    def info(self, mountpoint: int, secret: str) -> dict[str, Any]:
        """The streaming plugin's ``info`` on a mountpoint (its media, each with ``age_ms`` since its last packet;
        ``error_code`` 455 where there is none)."""
        api = JanusApi(self.url)
        session, handle = api.attach("streaming")
        try:
            body = {"janus": "message", "body": {"request": "info", "id": mountpoint, "secret": secret}}
            data: dict[str, Any] = api.post(f"/{session}/{handle}", body)["plugindata"]["data"]
            return data
        finally:
            api.end(session)
